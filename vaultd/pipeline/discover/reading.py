"""Reading a note as the rules admit it now: the file a vault path names on disk (under its NFC
spelling or another), reached without following a link the walk would not follow, and opened
without a window between the check and the read.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence

from vaultd.errors import NoteUnavailableError
from vaultd.pipeline.discover.rules import CompiledRules, nfc


class NoteReader:
    """Opens the notes of the vault `rules` are compiled for."""

    def __init__(self, rules: CompiledRules) -> None:
        self.rules = rules
        self.root = rules.root
        self.real_root = os.path.realpath(rules.root)
        self.follow_symlinks = rules.rules.follow_symlinks

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
            spelled = sorted(n for n in names if nfc(n) == part)
            if not spelled:
                return None
            path = os.path.join(path, spelled[0])
        return path

    def reachable(self, path: str) -> bool:
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
            if not self.follow_symlinks:
                return False
            is_dir = depth < len(disk) or os.path.isdir(here)
            if self.link_verdict(here, is_dir) is not None:
                return False
        # Links followed above may still end outside the vault further down.
        if self.follow_symlinks:
            real = os.path.realpath(path)
            if os.path.commonpath([real, self.real_root]) != self.real_root:
                return False
        return True

    def open_note(self, rel_path: str, *, any_kind: bool = False) -> int:
        """A descriptor open for reading on the note `rel_path`, as the rules admit it now
        (with `any_kind`, a file of any kind, as every rule but the kind's admits it).

        The file opened is the one the walk would reach by that name, whatever was swapped in
        since it was indexed: each component is opened relative to the one before without
        following a symlink (`O_NOFOLLOW`), so a note or a folder replaced by a link out of
        the vault fails to open instead of being read, with no window between a check and
        the read. With `follow_symlinks`, links on the way are resolved first, checked as the
        walk checks them, and the resolved path is then opened the same way. Raises
        NoteUnavailableError (a FileNotFoundError) when there is no such note.
        """
        rel = "/".join(nfc(p) for p in rel_path.split("/") if p not in ("", "."))
        if not rel or self.rules.is_ignored(rel, any_kind=any_kind):
            raise NoteUnavailableError(rel_path, "not a note the vault's rules admit", "excluded")
        try:
            path = self.locate(rel)
        except PermissionError as exc:
            raise NoteUnavailableError(
                rel_path, "a folder on the way cannot be read", "unreadable"
            ) from exc
        if path is None:
            raise NoteUnavailableError(rel_path, "no such note")
        if self.follow_symlinks:
            if not self.reachable(path):
                raise NoteUnavailableError(rel_path, "it leads out of the vault", "link")
            path = os.path.realpath(path)
            base = self.real_root
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
            if info.st_size > self.rules.cap(rel):
                raise NoteUnavailableError(
                    rel_path, self.rules.too_big_reason(info.st_size, rel), "too_big"
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

    def read_note(self, rel_path: str, *, any_kind: bool = False) -> tuple[bytes, os.stat_result]:
        """The note's bytes and the stat they were read under (see `open_note`)."""
        fd = self.open_note(rel_path, any_kind=any_kind)
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            return handle.read(), info

    def link_verdict(self, path: str, is_dir: bool) -> str | None:
        """Why the walk does not follow this symlink, or None when it does."""
        real = os.path.realpath(path)
        # Only a link can leave the vault: a linked directory was checked on the way in.
        if os.path.commonpath([real, self.real_root]) != self.real_root:
            return "symlink points outside the vault"
        target = os.path.relpath(real, self.real_root).replace(os.sep, "/")
        if not self.rules.is_ignored(target, is_dir=is_dir):
            # The walk reaches the target under its own name; one path per note is enough.
            slash = "/" if is_dir else ""
            what = "directory" if is_dir else "file"
            return f"same {what} as {nfc(target)}{slash}"
        return None
