"""Which files under the vault are notes: the ignore rules and a streaming walk.

The rules, in the order they are applied (the first that rejects a path wins, so exclude
beats include):

1. only regular files of a kind indexed: `*.md` (any case) and Excalidraw drawings always,
   canvases, PDFs and images as `[attachments]` says, source files matching its `code`
   globs (`records.kind_of`); a file of any other kind is counted in `Discovery.unindexed`
   by its kind, so status and doctor can say what the vault holds that is not indexed;
2. never dot-files, dot-directories (`.obsidian/`, `.trash/`, `.git/`) or `node_modules/`;
3. never editor swap, backup and temp files;
4. with `skip_conflicts`, never the copies sync tools leave on conflicting edits;
5. with `use_gitignore`, `.gitignore` and `.ignore` files anywhere in the vault;
6. the user's `exclude` globs, then their `include` globs when there are any;
7. symlinks only with `follow_symlinks`, and never to something outside the vault;
8. nothing bigger than `max_file_mb` (a PDF: `max_pdf_mb`, an image: `max_image_mb`);
9. nothing whose name is not valid UTF-8.

Paths are vault-relative POSIX strings in Unicode NFC, so a note synced from macOS (which may
store names decomposed) has the same path everywhere, and rules match it either way.

What a user would want to hear about (a folder that cannot be read, a name that is not UTF-8,
a link out of the vault or in a loop, two spellings of one name, a file over the size cap) is
listed in `Discovery.skipped` after each walk and logged the first time it is seen. A note over
the size cap is a note left out: it is also put in `Discovery.left_out`, by the walk and by
`state_of` alike, and the indexer records, logs and reports it (the manifest remembers it).
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import stat
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

import pathspec
import structlog

from vaultd.config import AttachmentsSection, VaultSection
from vaultd.errors import NoteUnavailableError, VaultdError
from vaultd.records import FileState, kind_of

log = structlog.get_logger(__name__)

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
_Ignores = Sequence[tuple[int, pathspec.GitIgnoreSpec]]
_Skips = tuple[tuple[str, str], ...]


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


def file_state(rel: str, st: os.stat_result, hashed_ns: int = 0) -> FileState:
    """The note `rel`'s state from its stat (`hashed_ns`: see `FileState`)."""
    return FileState(rel, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, hashed_ns)


def _nfc(name: str) -> str:
    return unicodedata.normalize("NFC", name)


def _is_utf8(name: str) -> bool:
    # os.fsdecode turns undecodable bytes into lone surrogates, which UTF-8 cannot encode.
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _printable(rel: str) -> str:
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


def _git_ignored(ignores: _Ignores, parts: Sequence[str], is_dir: bool) -> bool:
    # Each ignore file sees the path relative to its own directory; deeper files are consulted
    # later, so their verdict (including a `!negation`) overrides the ones above.
    verdict: bool | None = None
    for depth, spec in ignores:
        rel = "/".join(parts[depth:]) + ("/" if is_dir else "")
        result = spec.check_file(rel).include
        if result is not None:
            verdict = result
    return bool(verdict)


class Discovery:
    """Finds the notes under `root` according to `rules`.

    One instance can serve many walks and `is_ignored` calls; `.gitignore` and `.ignore`
    files are re-read whenever they change.
    """

    def __init__(self, root: Path, rules: IgnoreRules) -> None:
        self.root = root
        self.rules = rules
        #: (path, reason) for files and directories the last walk left out that a user would
        #: want to hear about; ordinary ignore-rule matches are not listed. A full walk starts
        #: it afresh; `walk_under` renews only its own subtree's entries and `state_of` only
        #: adds, so one pass over several folders and notes reports all it could not read.
        self.skipped: list[tuple[str, str]] = []
        #: The entries of `skipped` that are there because they could not be read (no
        #: permission, an error listing a folder or reading an ignore file), as opposed to
        #: left out by a rule: see `unreadable`.
        self._unreadable: set[tuple[str, str]] = set()
        #: Skips already logged: a rescan every hour must not repeat them every hour.
        self._logged: set[tuple[str, str]] = set()
        #: Notes over the size cap met since the last full walk (or since the indexer cleared
        #: it), by path: their stat and the reason. Not logged here: the indexer records them
        #: in the manifest and logs each the first time.
        self.left_out: dict[str, tuple[FileState, str]] = {}
        #: Files of kinds not indexed met by the last full walk, by kind ("other" for files no
        #: extractor reads): nothing the vault holds goes unmentioned.
        self.unindexed: dict[str, int] = {}
        self._exclude = _compile(rules.exclude)
        self._include = _compile(rules.include)
        self._code = _compile(rules.code)
        self._max_bytes = rules.max_file_mb * _MB
        self._caps_mb = dict(rules.kind_caps_mb)
        self._real_root = os.path.realpath(root)
        # Directory (vault-relative) -> (ignore files' stat signature, patterns, read errors).
        self._ignore_cache: dict[str, tuple[object, pathspec.GitIgnoreSpec | None, _Skips]] = {}

    # -- the rules ------------------------------------------------------------------------

    def kind(self, rel_path: str) -> str:
        """The kind of file a vault path names (`records.NoteKind`), or "other"."""
        kind = kind_of(rel_path)
        if kind is None and self._code is not None and self._code.match_file(rel_path):
            return "code"
        return kind or "other"

    def _rejected(
        self,
        parts: Sequence[str],
        is_dir: bool,
        ignores: _Ignores,
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

    def _ignore_spec(
        self, dir_path: str, rel_dir: str, *, report: bool = False
    ) -> pathspec.GitIgnoreSpec | None:
        """The patterns of the ignore files in one directory, re-read only when they change.

        With `report`, an ignore file that cannot be read goes into `skipped`, on every walk.
        """
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
        if report:
            for path, reason in cached[2]:
                self._skip_printable(path, reason, unreadable=True)
        return cached[1]

    @staticmethod
    def _read_ignore_files(
        dir_path: str, rel_dir: str, signature: list[tuple[int, int] | None]
    ) -> tuple[pathspec.GitIgnoreSpec | None, _Skips]:
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
                problems.append((_printable(where), f"cannot read: {exc.strerror or exc}"))
        return _compile(lines), tuple(problems)

    def is_ignored(self, rel_path: str, *, is_dir: bool = False) -> bool:
        """Whether the walk would leave out this vault-relative path (a note unless `is_dir`).

        Only ignore files and, for the iCloud rule, a note's siblings are looked at on disk;
        the size and symlink rules need the file itself and are the walk's business.
        """
        parts = [_nfc(p) for p in rel_path.replace(os.sep, "/").split("/") if p not in ("", ".")]
        if not parts:
            return not is_dir
        return self._ignored(parts, is_dir, names_too=True)

    def _ignored(self, parts: Sequence[str], is_dir: bool, *, names_too: bool) -> bool:
        """`is_ignored` for parts, the rule on UTF-8 names only with `names_too`."""
        ignores: list[tuple[int, pathspec.GitIgnoreSpec]] = []
        for depth in range(len(parts)):
            parent = parts[:depth]
            if self.rules.use_gitignore:
                spec = self._ignore_spec(os.path.join(self.root, *parent), "/".join(parent))
                if spec is not None:
                    ignores.append((depth, spec))
            here_is_dir = is_dir or depth < len(parts) - 1

            def sibling_exists(name: str, parent: Sequence[str] = parent) -> bool:
                return os.path.lexists(os.path.join(self.root, *parent, name))

            if self._rejected(parts[: depth + 1], here_is_dir, ignores, sibling_exists):
                return True
            if names_too and not _is_utf8(parts[depth]):
                return True
        return False

    def report_undecodable(self, rel_paths: Iterable[str]) -> None:
        """Report names the watcher met that are not UTF-8 as a walk reports them (in
        `skipped`, logged the first time), and drop the reports of those gone since.

        `rel_paths` are vault paths as os.fsdecode gives them; what is reported is the first
        name on each that is not UTF-8, as the walk, which goes no deeper, would.
        """
        for rel_path in rel_paths:
            disk = [p for p in rel_path.split("/") if p not in ("", ".")]
            depth = next((i for i, p in enumerate(disk) if not _is_utf8(p)), None)
            if depth is None:
                continue
            head = [_nfc(p) for p in disk[: depth + 1]]
            rel = "/".join(head)
            path = os.path.join(self.root, *disk[: depth + 1])
            try:
                follow = self.rules.follow_symlinks
                info = os.stat(path) if follow else os.lstat(path)
                there = self._reachable(path)
            except (OSError, ValueError):
                info, there = None, False
            is_dir = info is not None and stat.S_ISDIR(info.st_mode)
            report = (
                info is not None
                and (is_dir or stat.S_ISREG(info.st_mode))
                and there
                and not self._ignored(head, is_dir, names_too=False)
            )
            entry = (_printable(rel + ("/" if is_dir else "")), UNDECODABLE)
            for seen in ((_printable(rel), UNDECODABLE), (_printable(rel + "/"), UNDECODABLE)):
                if seen != entry or not report:
                    self._forget(seen)
            if report and entry not in self.skipped:
                self._skip_printable(*entry)

    def _forget(self, entry: tuple[str, str]) -> None:
        if entry in self.skipped:
            self.skipped = [e for e in self.skipped if e != entry]
        # Logged again if it comes back.
        self._logged.discard(entry)

    # -- the walk -------------------------------------------------------------------------

    def walk(self) -> Iterator[FileState]:
        """Every note under the root, depth first, each directory in name order.

        Raises VaultdError when the root itself cannot be listed: an unreadable vault must
        not look like an empty one, or every note would be taken for deleted.
        """
        self.skipped = []
        self.left_out = {}
        self.unindexed = {}
        root = os.fspath(self.root)
        try:
            st = os.stat(root)
            with os.scandir(root) as listing:
                entries = list(listing)
        except OSError as exc:
            raise VaultdError(f"cannot read the vault {root}: {exc.strerror or exc}") from exc
        key = (st.st_dev, st.st_ino)
        yield from self._walk_dir(root, [], entries, (), (key,), {key: "."})
        # A problem gone by now is logged again if it comes back.
        self._logged &= set(self.skipped)

    def walk_under(self, rel_dir: str) -> Iterator[FileState]:
        """The notes of one subtree, as `walk` would find them (for a folder moved in)."""
        parts = [_nfc(p) for p in rel_dir.split("/") if p not in ("", ".")]
        if not parts:
            yield from self.walk()
            return
        # Another folder's entries must survive: a folder walked earlier in the same pass may
        # be unreadable, and its notes are kept only while it is listed here.
        under = _printable("/".join(parts))
        self.skipped = [
            (path, reason)
            for path, reason in self.skipped
            if path.rstrip("/") != under and not path.startswith(under + "/")
        ]
        if self.is_ignored("/".join(parts), is_dir=True):
            return
        ignores: list[tuple[int, pathspec.GitIgnoreSpec]] = []
        for depth in range(len(parts)):
            if self.rules.use_gitignore:
                spec = self._ignore_spec(
                    os.path.join(self.root, *parts[:depth]), "/".join(parts[:depth])
                )
                if spec is not None:
                    ignores.append((depth, spec))
        try:
            path = self.locate("/".join(parts))
            if path is None or not self._reachable(path):
                return
            st = os.stat(path)
        except PermissionError:
            self._skip("/".join(parts) + "/", "permission denied", unreadable=True)
            return
        except (OSError, ValueError):
            return
        if not stat.S_ISDIR(st.st_mode):
            return
        listing = self._list(path, "/".join(parts))
        if listing is None:
            return
        key = (st.st_dev, st.st_ino)
        yield from self._walk_dir(path, parts, listing, tuple(ignores), (key,), {key: rel_dir})

    def state_of(self, rel_path: str) -> FileState | None:
        """One note's stat as the walk would report it, or None if the walk would skip it."""
        rel = "/".join(_nfc(p) for p in rel_path.split("/") if p not in ("", "."))
        if not rel or self.is_ignored(rel):
            return None
        try:
            path = self.locate(rel)
            if path is None or not self._reachable(path):
                return None
            st = os.stat(path) if self.rules.follow_symlinks else os.lstat(path)
        except PermissionError:
            # A folder above the note cannot be searched (chmod 000): that is not a deletion.
            # Listed like a folder the walk could not read, so the note is kept.
            folder = rel.rpartition("/")[0]
            if folder and (folder + "/", "permission denied") not in self.skipped:
                self._skip(folder + "/", "permission denied", unreadable=True)
            return None
        except (OSError, ValueError):  # ValueError: a NUL byte in the path
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        state = file_state(rel, st)
        if st.st_size > self._cap(rel):
            self.left_out[rel] = (state, self._too_big_reason(st.st_size, rel))
            return None
        return state

    def locate(self, rel_path: str) -> str | None:
        """The file a vault path names on disk, or None when there is none.

        Paths are NFC but names on disk need not be (a vault synced from macOS keeps
        decomposed names), so a component missing under its NFC spelling is looked up among
        its directory's entries. When both spellings exist, the NFC one is the note, as in
        the walk. Raises PermissionError when a folder on the way cannot be listed: that
        says nothing about whether the file is there.
        """
        path = os.fspath(self.root)
        for part in (p for p in rel_path.split("/") if p not in ("", ".")):
            here = os.path.join(path, part)
            if os.path.lexists(here):
                path = here
                continue
            try:
                names = os.listdir(path)
            except PermissionError:
                raise
            except OSError:
                return None
            spelled = sorted(n for n in names if _nfc(n) == part)
            if not spelled:
                return None
            path = os.path.join(path, spelled[0])
        return path

    def _reachable(self, path: str) -> bool:
        """Whether the walk could reach `path` (a file or folder inside the root) by its name.

        Without `follow_symlinks` no component may be a link; with it, every link on the
        way must be one the walk follows. Otherwise a request for `link/note.md`, or an event
        queued before a folder was swapped for a link, would read a file outside the vault.
        """
        root = os.fspath(self.root)
        disk = os.path.relpath(path, root).split(os.sep)
        if ".." in disk:
            return False
        for depth in range(1, len(disk) + 1):
            here = os.path.join(root, *disk[:depth])
            if not os.path.islink(here):
                continue
            if not self.rules.follow_symlinks:
                return False
            is_dir = depth < len(disk) or os.path.isdir(here)
            if self._link_verdict(here, is_dir) is not None:
                return False
        # Links followed above may still end outside the vault further down.
        if self.rules.follow_symlinks:
            real = os.path.realpath(path)
            if os.path.commonpath([real, self._real_root]) != self._real_root:
                return False
        return True

    def open_note(self, rel_path: str) -> int:
        """A descriptor open for reading on the note `rel_path`, as the rules admit it now.

        The file opened is the one the walk would reach by that name, whatever was swapped in
        since it was indexed: each component is opened relative to the one before without
        following a symlink (`O_NOFOLLOW`), so a note or a folder replaced by a link out of
        the vault fails to open instead of being read, with no window between a check and
        the read. With `follow_symlinks`, links on the way are resolved first, checked as the
        walk checks them, and the resolved path is then opened the same way. Raises
        NoteUnavailableError (a FileNotFoundError) when there is no such note.
        """
        rel = "/".join(_nfc(p) for p in rel_path.split("/") if p not in ("", "."))
        if not rel or self.is_ignored(rel):
            raise NoteUnavailableError(rel_path, "not a note the vault's rules admit", "excluded")
        try:
            path = self.locate(rel)
        except PermissionError as exc:
            raise NoteUnavailableError(
                rel_path, "a folder on the way cannot be read", "unreadable"
            ) from exc
        if path is None:
            raise NoteUnavailableError(rel_path, "no such note")
        if self.rules.follow_symlinks:
            if not self._reachable(path):
                raise NoteUnavailableError(rel_path, "it leads out of the vault", "link")
            path = os.path.realpath(path)
            base = self._real_root
        else:
            base = os.fspath(self.root)
        parts = os.path.relpath(path, base).split(os.sep)
        if ".." in parts:
            raise NoteUnavailableError(rel_path, "it leads out of the vault", "link")
        fd = self._open_below(base, parts, rel_path)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise NoteUnavailableError(rel_path, "not a regular file", "unreadable")
            if info.st_size > self._cap(rel):
                raise NoteUnavailableError(
                    rel_path, self._too_big_reason(info.st_size, rel), "too_big"
                )
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_below(self, base: str, parts: Sequence[str], rel_path: str) -> int:
        nofollow = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        try:
            here = os.open(base, os.O_RDONLY | os.O_DIRECTORY | nofollow)
        except OSError as exc:
            raise NoteUnavailableError(
                rel_path, f"the vault cannot be opened ({exc})", "unreadable"
            ) from exc
        try:
            for part in parts[:-1]:
                below = os.open(part, os.O_RDONLY | os.O_DIRECTORY | nofollow, dir_fd=here)
                os.close(here)
                here = below
            # O_NONBLOCK: a FIFO swapped in for the note must not hang the reader.
            return os.open(parts[-1], os.O_RDONLY | os.O_NONBLOCK | nofollow, dir_fd=here)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise NoteUnavailableError(
                    rel_path, "a symlink was put in its place", "link"
                ) from exc
            if exc.errno == errno.ENOENT:
                raise NoteUnavailableError(rel_path, "no such note") from exc
            raise NoteUnavailableError(rel_path, exc.strerror or str(exc), "unreadable") from exc
        finally:
            os.close(here)

    def read_note(self, rel_path: str) -> tuple[bytes, os.stat_result]:
        """The note's bytes and the stat they were read under (see `open_note`)."""
        fd = self.open_note(rel_path)
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            return handle.read(), info

    def _cap(self, rel: str) -> float:
        """The size cap of the file `rel`, in bytes: its kind's, or `max_file_mb`."""
        mb = self._caps_mb.get(self.kind(rel))
        return self._max_bytes if mb is None else mb * _MB

    def _too_big_reason(self, size: int, rel: str) -> str:
        mb = self._caps_mb.get(self.kind(rel), self.rules.max_file_mb)
        return f"larger than the {mb:g} MB limit ({size / _MB:.1f} MB)"

    @property
    def unreadable(self) -> list[tuple[str, str]]:
        """The skipped files and folders (ending in "/") that could not be read: their notes
        are not gone, and come back once they are readable again."""
        return [entry for entry in self.skipped if entry in self._unreadable]

    def _skip(self, rel: str, reason: str, *, unreadable: bool = False) -> None:
        self._skip_printable(_printable(rel), reason, unreadable=unreadable)

    def _skip_printable(self, path: str, reason: str, *, unreadable: bool = False) -> None:
        entry = (path, reason)
        self.skipped.append(entry)
        if unreadable:
            self._unreadable.add(entry)
        if entry not in self._logged:
            self._logged.add(entry)
            log.warning("not indexed", path=path, reason=reason)

    def _skip_link(self, path: str, rel: str, is_dir: bool) -> bool:
        """Whether a followed symlink leads somewhere the walk must not, or need not, go."""
        reason = self._link_verdict(path, is_dir)
        if reason is not None:
            self._skip(rel + ("/" if is_dir else ""), reason)
        return reason is not None

    def _link_verdict(self, path: str, is_dir: bool) -> str | None:
        """Why the walk does not follow this symlink, or None when it does."""
        real = os.path.realpath(path)
        # Only a link can leave the vault: a linked directory was checked on the way in.
        if os.path.commonpath([real, self._real_root]) != self._real_root:
            return "symlink points outside the vault"
        target = os.path.relpath(real, self._real_root).replace(os.sep, "/")
        if not self.is_ignored(target, is_dir=is_dir):
            # The walk reaches the target under its own name; one path per note is enough.
            slash = "/" if is_dir else ""
            what = "directory" if is_dir else "file"
            return f"same {what} as {_nfc(target)}{slash}"
        return None

    def _list(self, path: str, rel: str) -> list[os.DirEntry[str]] | None:
        try:
            with os.scandir(path) as listing:
                return list(listing)
        except FileNotFoundError:
            return None  # removed while we walked; the next walk will not see it either
        except PermissionError:
            self._skip(rel + "/", "permission denied", unreadable=True)
        except OSError as exc:
            self._skip(rel + "/", f"cannot list: {exc.strerror or exc}", unreadable=True)
        return None

    def _walk_dir(
        self,
        path: str,
        parts: list[str],
        entries: list[os.DirEntry[str]],
        ignores: tuple[tuple[int, pathspec.GitIgnoreSpec], ...],
        ancestors: tuple[tuple[int, int], ...],
        visited: dict[tuple[int, int], str],
    ) -> Iterator[FileState]:
        if self.rules.use_gitignore:
            spec = self._ignore_spec(path, "/".join(parts), report=True)
            if spec is not None:
                ignores = (*ignores, (len(parts), spec))
        # Of two spellings of one name, the NFC one sorts first: it is the file a reader of
        # the NFC path opens, so its stat must be the one recorded.
        named = sorted(
            ((_nfc(entry.name), entry) for entry in entries),
            key=lambda p: (p[0], p[1].name != p[0]),
        )
        names = {name for name, _ in named}
        follow = self.rules.follow_symlinks
        previous = None

        for name, entry in named:
            child = [*parts, name]
            rel = "/".join(child)
            if name == previous:
                # Two spellings of one name (NFC and NFD) can coexist on Linux; paths must not.
                self._skip(rel, "another file has the same name after Unicode normalisation")
                continue
            previous = name
            try:
                is_link = entry.is_symlink()
                if is_link and not follow:
                    continue
                # Type checks come before any stat: most entries fail a cheap rule first.
                is_dir = entry.is_dir(follow_symlinks=follow)
                if not is_dir and not entry.is_file(follow_symlinks=follow):
                    continue
                if self._rejected(child, is_dir, ignores, names.__contains__):
                    if not is_dir and not self._rejected(
                        child, is_dir, ignores, names.__contains__, any_kind=True
                    ):
                        # Of a kind not indexed, but not ignored either: counted.
                        kind = self.kind(rel)
                        self.unindexed[kind] = self.unindexed.get(kind, 0) + 1
                    continue
                if not _is_utf8(name):
                    self._skip(rel + ("/" if is_dir else ""), UNDECODABLE)
                    continue
                st = entry.stat(follow_symlinks=follow)
            except FileNotFoundError:
                continue  # a dangling symlink, or removed while we walked
            except OSError as exc:
                reason = "symlink loop" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
                self._skip(rel, reason)
                continue

            key = (st.st_dev, st.st_ino)
            if is_dir and key in ancestors:
                self._skip(rel + "/", "symlink loop")
                continue
            if is_link and self._skip_link(entry.path, rel, is_dir):
                continue
            if is_dir:
                if key in visited:
                    # Without this, links into one tree could index the same notes many times.
                    self._skip(rel + "/", f"same directory as {visited[key]}/")
                    continue
                visited[key] = rel
                listing = self._list(entry.path, rel)
                if listing is not None:
                    yield from self._walk_dir(
                        entry.path,
                        child,
                        listing,
                        ignores,
                        (*ancestors, key),
                        visited,
                    )
            elif not stat.S_ISREG(st.st_mode):
                continue
            elif st.st_size > self._cap(rel):
                reason = self._too_big_reason(st.st_size, rel)
                self.skipped.append((rel, reason))
                self.left_out[rel] = (file_state(rel, st), reason)
            else:
                yield file_state(rel, st)
