"""The ignore rules: which vault paths name files vaultd reads (rules 1 to 6 and 8 of
`vaultd.pipeline.discover`), judged from the names and the ignore files on the way.
"""

from __future__ import annotations

import dataclasses
import os
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

import pathspec

from vaultd.config import AttachmentsSection, VaultSection
from vaultd.records import kind_of

_MB = 1024 * 1024
#: Why a file or folder whose name is not UTF-8 is not indexed.
UNDECODABLE = "file name is not valid UTF-8"

# Most of these never end in .md, but a few do (`~$note.md`) and the rest cost nothing.
_TEMP_NAMES = (
    "*.swp",
    "*.swo",
    "*.swx",
    "*~",
    "4913",  # vim writes and deletes this to probe whether a directory is writable
    ".#*",
    "#*#",
    "*.tmp",
    ".syncthing.*.tmp",
    "~$*",
    ".DS_Store",
)

_CONFLICT_COPY = re.compile(
    r" \([^()]*conflicted copy[^()]*\)\.md$"  # Dropbox
    r"| \(case conflict(?: \d+)?\)\.md$"  # Dropbox, on case-insensitive clashes
    r"|\.sync-conflict-\d{8}-\d{6}-[0-9a-z]{7}\.md$",  # Syncthing
    re.IGNORECASE,
)
# iCloud names a conflicting copy "x 2.md" beside "x.md"; alone, "Chapter 2.md" is a real note.
_NUMBERED_COPY = re.compile(r"^(.+) ([2-9]|[1-9]\d+)(\.md)$", re.IGNORECASE)

_IGNORE_FILES = (".gitignore", ".ignore")  # later lines win, so .ignore overrides .gitignore

#: Ignore files that apply at one level of the walk: (depth of their directory, patterns).
Ignores = Sequence[tuple[int, pathspec.GitIgnoreSpec]]
Skips = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class IgnoreRules:
    """The user-controlled part of the rules; the fixed part lives in this module."""

    exclude: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    follow_symlinks: bool = False
    skip_conflicts: bool = True
    use_gitignore: bool = True
    max_file_mb: float = 8.0
    #: The kinds of file indexed (`AttachmentsSection.kinds`), and the code globs.
    kinds: frozenset[str] = frozenset({"note", "excalidraw"})
    code: tuple[str, ...] = ()
    #: Size caps of the kinds that have their own (`[attachments]`), in MB.
    kind_caps_mb: tuple[tuple[str, float], ...] = ()

    @classmethod
    def from_config(
        cls, vault: VaultSection, attachments: AttachmentsSection | None = None
    ) -> IgnoreRules:
        rules = cls(
            exclude=vault.exclude,
            include=vault.include,
            follow_symlinks=vault.follow_symlinks,
            skip_conflicts=vault.skip_conflicts,
            use_gitignore=vault.use_gitignore,
            max_file_mb=vault.max_file_mb,
        )
        if attachments is None:
            return rules  # Markdown notes and drawings only (a sample of the notes, say)
        return dataclasses.replace(
            rules,
            kinds=attachments.kinds(),
            code=attachments.code,
            kind_caps_mb=(("pdf", attachments.max_pdf_mb), ("image", attachments.max_image_mb)),
        )


def nfc(name: str) -> str:
    return unicodedata.normalize("NFC", name)


def is_utf8(name: str) -> bool:
    # os.fsdecode turns undecodable bytes into lone surrogates, which UTF-8 cannot encode.
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable(rel: str) -> str:
    """A path fit for a log line or JSON, with undecodable bytes shown as \\xNN."""
    return os.fsencode(rel).decode("utf-8", "backslashreplace")


def _is_conflict_copy(name: str, sibling_exists: Callable[[str], bool]) -> bool:
    if _CONFLICT_COPY.search(name):
        return True
    numbered = _NUMBERED_COPY.match(name)
    return numbered is not None and sibling_exists(numbered[1] + numbered[3])


def _compile(lines: Sequence[str]) -> pathspec.GitIgnoreSpec | None:
    """Patterns as git reads them: a line git would reject is dropped, not fatal."""
    if not lines:
        return None
    try:
        return pathspec.GitIgnoreSpec.from_lines(lines)
    except ValueError:
        pass
    valid = []
    for line in lines:
        try:
            pathspec.GitIgnoreSpec.from_lines([line])
        except ValueError:
            continue
        valid.append(line)
    return pathspec.GitIgnoreSpec.from_lines(valid)


def _git_ignored(ignores: Ignores, parts: Sequence[str], is_dir: bool) -> bool:
    # Each ignore file sees the path relative to its own directory; deeper files are consulted
    # later, so their verdict (including a `!negation`) overrides the ones above.
    verdict: bool | None = None
    for depth, spec in ignores:
        rel = "/".join(parts[depth:]) + ("/" if is_dir else "")
        result = spec.check_file(rel).include
        if result is not None:
            verdict = result
    return bool(verdict)


class CompiledRules:
    """`IgnoreRules` compiled for the vault at `root`; `.gitignore` and `.ignore` files are
    re-read whenever they change."""

    def __init__(self, root: Path, rules: IgnoreRules) -> None:
        self.root = root
        self.rules = rules
        self._exclude = _compile(rules.exclude)
        self._include = _compile(rules.include)
        self._code = _compile(rules.code)
        self._max_bytes = rules.max_file_mb * _MB
        self._caps_mb = dict(rules.kind_caps_mb)
        # Directory (vault-relative) -> (ignore files' stat signature, patterns, read errors).
        self._ignore_cache: dict[str, tuple[object, pathspec.GitIgnoreSpec | None, Skips]] = {}

    def kind(self, rel_path: str) -> str:
        """The kind of file a vault path names (`records.NoteKind`), or "other"."""
        kind = kind_of(rel_path)
        if kind is None and self._code is not None and self._code.match_file(rel_path):
            return "code"
        return kind or "other"

    def rejected(
        self,
        parts: Sequence[str],
        is_dir: bool,
        ignores: Ignores,
        sibling_exists: Callable[[str], bool],
        *,
        any_kind: bool = False,
    ) -> bool:
        """Rules 1 to 6 for one path whose parent directories were all accepted (rule 1 not
        with `any_kind`)."""
        name = parts[-1]
        if name.startswith("."):
            return True
        if is_dir:
            if name == "node_modules":
                return True
        else:
            if not any_kind and self.kind("/".join(parts)) not in self.rules.kinds:
                return True
            if any(fnmatchcase(name, pattern) for pattern in _TEMP_NAMES):
                return True
            if self.rules.skip_conflicts and _is_conflict_copy(name, sibling_exists):
                return True
        if ignores and _git_ignored(ignores, parts, is_dir):
            return True
        rel = "/".join(parts) + ("/" if is_dir else "")
        if self._exclude is not None and self._exclude.match_file(rel):
            return True
        # Include only filters notes: a directory cannot be judged before seeing its files.
        return not is_dir and self._include is not None and not self._include.match_file(rel)

    def ignore_spec(
        self, dir_path: str, rel_dir: str
    ) -> tuple[pathspec.GitIgnoreSpec | None, Skips]:
        """The patterns of the ignore files in one directory, re-read only when they change,
        and the ignore files there that cannot be read (path, reason)."""
        signature: list[tuple[int, int] | None] = []
        for name in _IGNORE_FILES:
            try:
                st = os.stat(os.path.join(dir_path, name))
            except OSError:
                signature.append(None)
            else:
                signature.append((st.st_mtime_ns, st.st_size))
        cached = self._ignore_cache.get(rel_dir)
        if cached is None or cached[0] != signature:
            cached = (signature, *self._read_ignore_files(dir_path, rel_dir, signature))
            self._ignore_cache[rel_dir] = cached
        return cached[1], cached[2]

    @staticmethod
    def _read_ignore_files(
        dir_path: str, rel_dir: str, signature: list[tuple[int, int] | None]
    ) -> tuple[pathspec.GitIgnoreSpec | None, Skips]:
        lines: list[str] = []
        problems: list[tuple[str, str]] = []
        for name, seen in zip(_IGNORE_FILES, signature, strict=True):
            if seen is None:
                continue
            path = os.path.join(dir_path, name)
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    lines.extend(fh.read().splitlines())
            except OSError as exc:
                where = f"{rel_dir}/{name}" if rel_dir else name
                problems.append((printable(where), f"cannot read: {exc.strerror or exc}"))
        return _compile(lines), tuple(problems)

    def is_ignored(self, rel_path: str, *, is_dir: bool = False, any_kind: bool = False) -> bool:
        """Whether the walk would leave out this vault-relative path (a note unless `is_dir`);
        with `any_kind`, a file of any kind, as every rule but the first would (a package
        manifest beside the source files, read for their package).

        Only ignore files and, for the iCloud rule, a note's siblings are looked at on disk;
        the size and symlink rules need the file itself and are the walk's business.
        """
        parts = [nfc(p) for p in rel_path.replace(os.sep, "/").split("/") if p not in ("", ".")]
        if not parts:
            return not is_dir
        return self.ignored(parts, is_dir, names_too=True, any_kind=any_kind)

    def ignored(
        self, parts: Sequence[str], is_dir: bool, *, names_too: bool, any_kind: bool = False
    ) -> bool:
        """`is_ignored` for parts, the rule on UTF-8 names only with `names_too`, of any kind
        of file with `any_kind`."""
        ignores: list[tuple[int, pathspec.GitIgnoreSpec]] = []
        for depth in range(len(parts)):
            parent = parts[:depth]
            if self.rules.use_gitignore:
                spec, _ = self.ignore_spec(os.path.join(self.root, *parent), "/".join(parent))
                if spec is not None:
                    ignores.append((depth, spec))
            here_is_dir = is_dir or depth < len(parts) - 1

            def sibling_exists(name: str, parent: Sequence[str] = parent) -> bool:
                return os.path.lexists(os.path.join(self.root, *parent, name))

            if self.rejected(
                parts[: depth + 1], here_is_dir, ignores, sibling_exists, any_kind=any_kind
            ):
                return True
            if names_too and not is_utf8(parts[depth]):
                return True
        return False

    def cap(self, rel: str) -> float:
        """The size cap of the file `rel`, in bytes: its kind's, or `max_file_mb`."""
        mb = self._caps_mb.get(self.kind(rel))
        return self._max_bytes if mb is None else mb * _MB

    def too_big_reason(self, size: int, rel: str) -> str:
        mb = self._caps_mb.get(self.kind(rel), self.rules.max_file_mb)
        return f"larger than the {mb:g} MB limit ({size / _MB:.1f} MB)"
