"""The walk: every note under the vault, streamed, and what it left out that a user would want
to hear about (see `vaultd.pipeline.discover`).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

import pathspec
import structlog

from vaultd.errors import VaultdError
from vaultd.pipeline.discover.reading import NoteReader
from vaultd.pipeline.discover.rules import (
    UNDECODABLE,
    CompiledRules,
    IgnoreRules,
    Ignores,
    is_utf8,
    nfc,
    printable,
)
from vaultd.records import FileState

log = structlog.get_logger(__name__)


def file_state(rel: str, st: os.stat_result, hashed_ns: int = 0) -> FileState:
    """The note `rel`'s state from its stat (`hashed_ns`: see `FileState`)."""
    return FileState(rel, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, hashed_ns)


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
        #: `skipped` as it was when the walk under way began (None while none runs).
        self._before: list[tuple[str, str]] | None = None
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
        self._rules = CompiledRules(root, rules)
        self._reader = NoteReader(self._rules)

    # -- the rules ------------------------------------------------------------------------

    def kind(self, rel_path: str) -> str:
        """The kind of file a vault path names (`records.NoteKind`), or "other"."""
        return self._rules.kind(rel_path)

    def is_ignored(self, rel_path: str, *, is_dir: bool = False, any_kind: bool = False) -> bool:
        """Whether the walk would leave out this vault-relative path (a note unless `is_dir`;
        with `any_kind`, a file of any kind: see `CompiledRules.is_ignored`).

        Only ignore files and, for the iCloud rule, a note's siblings are looked at on disk;
        the size and symlink rules need the file itself and are the walk's business.
        """
        return self._rules.is_ignored(rel_path, is_dir=is_dir, any_kind=any_kind)

    def report_undecodable(self, rel_paths: Iterable[str]) -> None:
        """Report names the watcher met that are not UTF-8 as a walk reports them (in
        `skipped`, logged the first time), and drop the reports of those gone since.

        `rel_paths` are vault paths as os.fsdecode gives them; what is reported is the first
        name on each that is not UTF-8, as the walk, which goes no deeper, would.
        """
        for rel_path in rel_paths:
            disk = [p for p in rel_path.split("/") if p not in ("", ".")]
            depth = next((i for i, p in enumerate(disk) if not is_utf8(p)), None)
            if depth is None:
                continue
            head = [nfc(p) for p in disk[: depth + 1]]
            rel = "/".join(head)
            path = os.path.join(self.root, *disk[: depth + 1])
            try:
                follow = self.rules.follow_symlinks
                info = os.stat(path) if follow else os.lstat(path)
                there = self._reader.reachable(path)
            except (OSError, ValueError):
                info, there = None, False
            is_dir = info is not None and stat.S_ISDIR(info.st_mode)
            report = (
                info is not None
                and (is_dir or stat.S_ISREG(info.st_mode))
                and there
                and not self._rules.ignored(head, is_dir, names_too=False)
            )
            entry = (printable(rel + ("/" if is_dir else "")), UNDECODABLE)
            for seen in ((printable(rel), UNDECODABLE), (printable(rel + "/"), UNDECODABLE)):
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
        self._before = self.skipped
        self.skipped = []
        self.left_out = {}
        self.unindexed = {}
        try:
            root = os.fspath(self.root)
            try:
                st = os.stat(root)
                with os.scandir(root) as listing:
                    entries = list(listing)
            except OSError as exc:
                raise VaultdError(f"cannot read the vault {root}: {exc.strerror or exc}") from exc
            key = (st.st_dev, st.st_ino)
            yield from self._walk_dir(root, [], entries, (), (key,), {key: "."})
        finally:
            self._before = None
        # A problem gone by now is logged again if it comes back.
        self._logged &= set(self.skipped)

    def walk_under(self, rel_dir: str) -> Iterator[FileState]:
        """The notes of one subtree, as `walk` would find them (for a folder moved in)."""
        parts = [nfc(p) for p in rel_dir.split("/") if p not in ("", ".")]
        if not parts:
            yield from self.walk()
            return
        # Another folder's entries must survive: a folder walked earlier in the same pass may
        # be unreadable, and its notes are kept only while it is listed here.
        under = printable("/".join(parts))
        self._before = self.skipped
        self.skipped = [
            (path, reason)
            for path, reason in self.skipped
            if path.rstrip("/") != under and not path.startswith(under + "/")
        ]
        try:
            yield from self._walk_under(rel_dir, parts)
        finally:
            self._before = None

    def _walk_under(self, rel_dir: str, parts: list[str]) -> Iterator[FileState]:
        if self.is_ignored("/".join(parts), is_dir=True):
            return
        ignores: list[tuple[int, pathspec.GitIgnoreSpec]] = []
        for depth in range(len(parts)):
            if self.rules.use_gitignore:
                spec, _ = self._rules.ignore_spec(
                    os.path.join(self.root, *parts[:depth]), "/".join(parts[:depth])
                )
                if spec is not None:
                    ignores.append((depth, spec))
        try:
            path = self.locate("/".join(parts))
            if path is None or not self._reader.reachable(path):
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
        rel = "/".join(nfc(p) for p in rel_path.split("/") if p not in ("", "."))
        if not rel or self.is_ignored(rel):
            return None
        try:
            path = self.locate(rel)
            if path is None or not self._reader.reachable(path):
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
        if st.st_size > self._rules.cap(rel):
            self.left_out[rel] = (state, self._rules.too_big_reason(st.st_size, rel))
            return None
        return state

    # -- reading a note -----------------------------------------------------------------------

    def locate(self, rel_path: str) -> str | None:
        """The file a vault path names on disk, or None (see `NoteReader.locate`)."""
        return self._reader.locate(rel_path)

    def open_note(self, rel_path: str) -> int:
        """A descriptor open for reading on the note (see `NoteReader.open_note`)."""
        return self._reader.open_note(rel_path)

    def read_note(self, rel_path: str, *, any_kind: bool = False) -> tuple[bytes, os.stat_result]:
        """The note's bytes and the stat they were read under (see `NoteReader.open_note`);
        with `any_kind`, a file of any kind the other rules admit (a package manifest)."""
        return self._reader.read_note(rel_path, any_kind=any_kind)

    # -- what the walk left out -----------------------------------------------------------

    @property
    def reported(self) -> list[tuple[str, str]]:
        """`skipped` as status reports it: while a walk runs, with what the one before left
        out and this one has not met yet, so a walk under way never reads as having left
        out less. `skipped` is read first: a walk sets `_before` before it empties it."""
        skipped = self.skipped
        before = self._before
        if before is None:
            return list(skipped)
        return [*skipped, *(entry for entry in before if entry not in skipped)]

    @property
    def unreadable(self) -> list[tuple[str, str]]:
        """The skipped files and folders (ending in "/") that could not be read: their notes
        are not gone, and come back once they are readable again."""
        return [entry for entry in self.skipped if entry in self._unreadable]

    def _skip(self, rel: str, reason: str, *, unreadable: bool = False) -> None:
        self._skip_printable(printable(rel), reason, unreadable=unreadable)

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
        reason = self._reader.link_verdict(path, is_dir)
        if reason is not None:
            self._skip(rel + ("/" if is_dir else ""), reason)
        return reason is not None

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
        ignores: Ignores,
        ancestors: tuple[tuple[int, int], ...],
        visited: dict[tuple[int, int], str],
    ) -> Iterator[FileState]:
        if self.rules.use_gitignore:
            spec, problems = self._rules.ignore_spec(path, "/".join(parts))
            for where, reason in problems:
                # Reported on every walk, unlike the rules' own matches.
                self._skip_printable(where, reason, unreadable=True)
            if spec is not None:
                ignores = (*ignores, (len(parts), spec))
        # Of two spellings of one name, the NFC one sorts first: it is the file a reader of
        # the NFC path opens, so its stat must be the one recorded.
        named = sorted(
            ((nfc(entry.name), entry) for entry in entries),
            key=lambda p: (p[0], p[1].name != p[0]),
        )
        names = {name for name, _ in named}
        previous = None

        for name, entry in named:
            child = [*parts, name]
            rel = "/".join(child)
            if name == previous:
                # Two spellings of one name (NFC and NFD) can coexist on Linux; paths must not.
                self._skip(rel, "another file has the same name after Unicode normalisation")
                continue
            previous = name
            found = self._admitted(entry, child, ignores, names)
            if found is None:
                continue
            st, is_dir, is_link = found

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
            elif st.st_size > self._rules.cap(rel):
                reason = self._rules.too_big_reason(st.st_size, rel)
                self.skipped.append((rel, reason))
                self.left_out[rel] = (file_state(rel, st), reason)
            else:
                yield file_state(rel, st)

    def _admitted(
        self, entry: os.DirEntry[str], child: list[str], ignores: Ignores, names: set[str]
    ) -> tuple[os.stat_result, bool, bool] | None:
        """The entry's stat, whether it is a directory and whether a link, when the rules on
        its name and type admit it; None when they do not (counted or skipped as they say)."""
        rel = "/".join(child)
        follow = self.rules.follow_symlinks
        try:
            is_link = entry.is_symlink()
            if is_link and not follow:
                return None
            # Type checks come before any stat: most entries fail a cheap rule first.
            is_dir = entry.is_dir(follow_symlinks=follow)
            if not is_dir and not entry.is_file(follow_symlinks=follow):
                return None
            if self._rules.rejected(child, is_dir, ignores, names.__contains__):
                if not is_dir and not self._rules.rejected(
                    child, is_dir, ignores, names.__contains__, any_kind=True
                ):
                    # Of a kind not indexed, but not ignored either: counted.
                    kind = self.kind(rel)
                    self.unindexed[kind] = self.unindexed.get(kind, 0) + 1
                return None
            if not is_utf8(child[-1]):
                self._skip(rel + ("/" if is_dir else ""), UNDECODABLE)
                return None
            return entry.stat(follow_symlinks=follow), is_dir, is_link
        except FileNotFoundError:
            return None  # a dangling symlink, or removed while we walked
        except OSError as exc:
            reason = "symlink loop" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
            self._skip(rel, reason)
            return None
