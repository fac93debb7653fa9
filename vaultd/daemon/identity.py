"""Whether the vault root and `vaultd.db` are still what the daemon took on.

A path names a file by (device, inode), and either can be swapped under a running daemon
without it seeing an error: a vault root replaced by a symlink yields no note (each one is
opened without following links, `Discovery.open_note`), so every edit would be left out; an
unmounted vault shows the empty folder beneath the mount, which a reconcile would take for a
vault whose notes were all deleted; a `vaultd.db` deleted or replaced keeps taking the
connections' writes into a file no later start reads. Each check is one or two stats, cheap
enough for every tick of the main loop, so a failed write is followed by a check within a tick.

The configured vault path is resolved when the configuration is loaded, so a symlink given in
it is followed once, at start-up; the root watched is the folder it led to, and a link put in
that folder's place later is a change like any other.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from vaultd.index.status import IdentityCheck
from vaultd.storage.manifest import Manifest

FileId = tuple[int, int]


def _file_id(info: os.stat_result) -> FileId:
    return (info.st_dev, info.st_ino)


def check_root(root: Path, expected: FileId | None) -> IdentityCheck:
    """The vault root against the folder it was (`expected`; None: whatever it is now).

    Every state but "ok" and "replaced" means there is no vault to read now, which is never
    the same as a vault without notes: the daemon pauses and keeps the index as it is.
    """
    now = time.time()

    def verdict(state: str, reason: str | None, found: FileId | None = None) -> IdentityCheck:
        return IdentityCheck(state, reason, expected, found, now)

    try:
        # A Path method, not os.lstat: tests stand a Path whose calls fail in for a dead share.
        info = root.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return verdict("missing", f"the vault root {root} is missing")
    except OSError as exc:
        # A network share that went away answers ENOTCONN, EIO or ESTALE, not "no such
        # file": unreachable, which must never read as empty.
        return verdict("unreachable", f"the vault root {root} cannot be reached ({exc})")
    found = _file_id(info)
    if stat.S_ISLNK(info.st_mode):
        try:
            target = f" (to {os.readlink(root)})"
        except OSError:
            target = ""
        return verdict(
            "symlink",
            f"the vault root {root} was replaced by a symlink{target}; no note is read through "
            "it, so indexing is paused: put the folder back, or point [vault] path at the "
            "link's target and restart",
            found,
        )
    if not stat.S_ISDIR(info.st_mode):
        return verdict("not_directory", f"the vault root {root} is no longer a folder", found)
    if expected is None or found == expected:
        return verdict("ok", None, found)
    if found[0] != expected[0] and _empty(root):
        # What an unmount leaves: the folder the vault was mounted on.
        return verdict(
            "unmounted",
            f"the vault root {root} is now an empty folder on another filesystem (unmounted?); "
            "indexing is paused and the index kept until the vault is back or notes appear",
            found,
        )
    return verdict(
        "replaced", f"the vault root {root} was replaced by another folder; reconciling", found
    )


def _empty(root: Path) -> bool:
    try:
        with os.scandir(root) as entries:
            return next(entries, None) is None
    except OSError:
        return False  # cannot tell: the walk reports what it cannot read


def check_manifest(manifest: Manifest) -> IdentityCheck:
    """`vaultd.db` against the file the manifest opened.

    "missing" and "replaced" are fatal: the manifest's writes go on into the file it holds,
    lost at the next start. "unreachable" (the data directory cannot be searched now) says
    nothing about the file, so it only degrades.
    """
    now = time.time()
    path = manifest.path
    try:
        opened, found = manifest.file_identity()
    except OSError as exc:
        return IdentityCheck(
            "unreachable", f"{path} cannot be examined ({exc.strerror or exc})", None, None, now
        )
    if found == opened:
        return IdentityCheck("ok", None, opened, found, now)
    if found is None:
        return IdentityCheck(
            "missing", f"{path} was deleted while the daemon had it open", opened, None, now
        )
    return IdentityCheck(
        "replaced",
        f"{path} was replaced by another file while the daemon had it open",
        opened,
        found,
        now,
    )
