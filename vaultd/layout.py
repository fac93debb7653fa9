"""The data directory's layout, and keeping it private.

A data directory holds one vault's index: `vaultd.db` (every note's text), `vaultd.lock`,
`chroma/`, the daemon's record of where it listens and a few marker files. Nothing in it is
meant for another local user, so directories are 0700 and files 0600 whatever the umask a
command was started with. The CLI sets the process umask to 077 (the unit files' `UMask=0077`
for a shell), `private_dir` creates directories owner-only, and `tighten` takes back whatever
an older version or a library caller left open. `loose` is what `doctor` reports.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from vaultd.errors import SetupError

#: The manifest, vaultd's own database and the index's source of truth (vaultd.storage.manifest).
MANIFEST = "vaultd.db"
#: Held (flock) by the one process that owns the data directory (vaultd.storage.lock).
LOCK = "vaultd.lock"
#: The embedded Chroma store's directory (vaultd.storage.vectors).
CHROMA = "chroma"
#: What a damaged store is renamed to, after its own name and before a time stamp
#: (`chroma.damaged-20250101T120000`, see vaultd.storage.probe).
DAMAGED = ".damaged"
#: Present while a process has the store open: its owner died without closing it.
DIRTY = "vaultd.dirty"
#: The store's files (relative path → [size, mtime_ns]) as the last clean close left them.
CLEAN = "vaultd.clean"
#: Why and where the store was last moved aside; status shows it.
MOVED_ASIDE = "vaultd.store-aside.json"
#: Where a running daemon says it listens (see vaultd.api.locate).
DAEMON_RECORD = "daemon.json"
#: The socket in the data directory, where no private runtime directory is found.
SOCKET = "vaultd.sock"
#: Written when vaultd makes a data directory: it is vaultd's to remove (`vaultd forget`).
MARKER = "vaultd.dir"

#: Every regular file vaultd writes in a data directory: its own, SQLite's beside the manifest,
#: and the temporaries written and renamed into place (vaultd.storage.probe, vaultd.api.locate).
_FILES = frozenset(
    {
        MANIFEST,
        *(f"{MANIFEST}{suffix}" for suffix in ("-wal", "-shm", "-journal")),
        LOCK,
        DIRTY,
        CLEAN,
        f"{CLEAN}.tmp",
        MOVED_ASIDE,
        f"{MOVED_ASIDE}.tmp",
        DAEMON_RECORD,
        MARKER,
    }
)
_TEMPORARY = re.compile(rf"\.{re.escape(DAEMON_RECORD)}\.[0-9]+")
#: A store moved aside (vaultd.storage.probe), or by hand as doctor says.
_ASIDE = re.compile(rf"{re.escape(CHROMA + DAMAGED)}(-[0-9]{{8}}T[0-9]{{6}})?")

#: The process umask for everything vaultd creates.
PRIVATE_UMASK = 0o077


def vault_id(vault: Path) -> str:
    """A vault's identity: the SHA-256 of its resolved path, shortened.

    The data directory's name and the default socket's carry its first 8 digits; answers
    from the daemon carry 16, which a client compares with its own vault's.
    """
    return hashlib.sha256(str(vault).encode("utf-8", "surrogateescape")).hexdigest()[:16]


def vault_slug(vault: Path, *, name_bytes: int = 255) -> str:
    """`<vault name>-<8 digits of its id>`: readable, and distinct for two vaults named alike."""
    name = os.fsencode(vault.name)[:name_bytes].decode("utf-8", "ignore") or "vault"
    return f"{name}-{vault_id(vault)[:8]}"


def made_by_vaultd(name: str, mode: int) -> bool:
    """Whether an entry of a data directory, by its name and `lstat` mode, is one vaultd
    makes there: a link never is, nor a folder of a file's name or the reverse."""
    if name in _FILES or _TEMPORARY.fullmatch(name):
        return stat.S_ISREG(mode)
    if name == SOCKET:
        return stat.S_ISSOCK(mode)
    if name == CHROMA or _ASIDE.fullmatch(name):
        return stat.S_ISDIR(mode)
    return False


def mark_made(data_dir: Path) -> None:
    """Record in `data_dir`, just made, that vaultd made it (MARKER)."""
    fd = os.open(data_dir / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("vaultd made this folder for a vault's index; `vaultd forget` removes it\n")


def private_umask() -> None:
    """Make everything this process creates from now on owner-only."""
    os.umask(PRIVATE_UMASK)


def private_dir(path: Path) -> None:
    """Create `path` (and missing parents) 0700; tighten it if it exists open to others.

    Raises OSError when it cannot be created or is not a directory (the caller says what
    that means for it).
    """
    old = os.umask(PRIVATE_UMASK)  # missing parents too: mkdir's mode covers only the last one
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    finally:
        os.umask(old)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(path))
    if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, 0o700)


@dataclass(frozen=True, slots=True)
class Loose:
    """A file or directory that others may read or write."""

    path: Path
    mode: int
    is_dir: bool

    @property
    def wanted(self) -> int:
        return 0o700 if self.is_dir else stat.S_IMODE(self.mode) & ~0o077

    def describe(self) -> str:
        return f"{self.path} (mode {stat.S_IMODE(self.mode):03o})"


def loose(*roots: Path) -> list[Loose]:
    """Everything under `roots` (each a directory or a file) that is open to others."""
    return [entry for root in roots for entry in _walk_loose(root)]


def _walk_loose(root: Path) -> Iterator[Loose]:
    try:
        info = root.lstat()
    except OSError:
        return
    if stat.S_ISLNK(info.st_mode) or stat.S_ISSOCK(info.st_mode):
        return  # a link's mode means nothing; the socket is checked where it is served
    is_dir = stat.S_ISDIR(info.st_mode)
    if stat.S_IMODE(info.st_mode) & 0o077:
        yield Loose(root, info.st_mode, is_dir)
    if is_dir:
        try:
            children = sorted(root.iterdir())
        except OSError:
            return
        for child in children:
            yield from _walk_loose(child)


def tighten(*roots: Path) -> list[Loose]:
    """Make everything under `roots` owner-only; returns what was open (and is no longer).

    Entries this user does not own are left as they are (chmod would fail) and still
    returned by `loose`, so doctor names them.
    """
    fixed: list[Loose] = []
    uid = os.getuid()
    for entry in loose(*roots):
        try:
            if entry.path.lstat().st_uid != uid:
                continue
            os.chmod(entry.path, entry.wanted)
        except OSError:
            continue
        fixed.append(entry)
    return fixed


def made_folder(path: Path, made: str, *, missing: Path | None = None) -> None:
    """Raise SetupError unless `path` is a folder in its own right: not a link, which removing
    would follow into what it leads to, nor a file. `made` names what vaultd made there ("the
    cache"), `missing` the path to name when nothing is there (`path` itself by default)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise SetupError(f"nothing to forget: {missing or path} does not exist") from None
    if stat.S_ISLNK(info.st_mode):
        raise SetupError(
            f"{path} is a symbolic link (to {os.readlink(path)}): vaultd removes only {made} "
            "it made, never what a link leads to; nothing removed"
        )
    if not stat.S_ISDIR(info.st_mode):
        raise SetupError(f"{path} is not a folder vaultd made; nothing removed")
