"""One process owns a data directory: an advisory `flock` on a file inside it.

The kernel drops the lock when the process dies, however it dies, so a crash never leaves a
stale lock behind. A holder that is alive but stopped (SIGSTOP) keeps it: that is said as such.

The lock file says who holds it, as JSON: its pid and what it is (`Holder`), so that one who
finds the lock taken can tell a reader that lets go within seconds (a query answered without a
daemon, `vaultd status`, `doctor`) from a daemon or an index run, which keep it. A file of the
older form, a bare pid, is still read: its holder is of no known kind.

Taking the lock is also where a data directory is claimed: one that another user owns or can
write, or that holds their files, is refused before anything in it is opened (vaultd.trust).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import TracebackType

from vaultd.errors import DaemonStoppedError, DataDirError, LockedError, StoreError
from vaultd.layout import LOCK, mark_made, private_dir
from vaultd.trust import check_path, check_tree

#: Failures that stay until someone changes the setup: the directory cannot be used as it is.
#: Others (EIO, ENOSPC, EMFILE, ...) may pass, and a restart is worth trying.
_UNUSABLE = frozenset(
    {
        errno.EACCES,
        errno.EPERM,
        errno.EROFS,
        errno.ENOTDIR,
        errno.EEXIST,
        errno.EISDIR,
        errno.ENAMETOOLONG,
        errno.ELOOP,
    }
)


def read_only(path: Path) -> bool:
    """Whether `path` (or the nearest part of it that exists) is on a read-only mount."""
    while not os.path.exists(path) and path != path.parent:
        path = path.parent
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def unusable(data_dir: Path, problem: str, code: int = errno.EACCES) -> DataDirError:
    """The error for a data directory that cannot be created or written, saying what to do.

    `problem` is what failed, `code` its errno.
    """
    where = f"the data directory {data_dir}"
    if code == errno.EROFS or read_only(data_dir):
        return DataDirError(
            f"{where} is on a read-only file system ({problem}); set [store] path to a "
            "directory on a writable disk",
            str(data_dir),
            read_only=True,
        )
    if code in (errno.EACCES, errno.EPERM):
        advice = "give your user write access to it, or set [store] path to a writable directory"
    elif code in (errno.ENOTDIR, errno.EEXIST, errno.EISDIR):
        advice = "a file stands where a directory must be: move it, or set [store] path elsewhere"
    else:
        advice = "set [store] path to another directory"
    return DataDirError(f"{where} cannot be used ({problem}); {advice}", str(data_dir))


class Holder(StrEnum):
    """What holds a data directory's lock."""

    DAEMON = "daemon"
    #: `vaultd index` or `vaultd reindex` with no daemon running.
    INDEX = "index"
    #: A query command answered from the index (`vaultd search`, `related`, `note` ...).
    QUERY = "query"
    STATUS = "status"
    DOCTOR = "doctor"
    #: `vaultd mcp` answering from the index while no daemon runs.
    MCP = "mcp"
    FORGET = "forget"

    @classmethod
    def named(cls, value: object) -> Holder | None:
        """The holder `value` names; None for anything else (a newer version's kind)."""
        return next((kind for kind in cls if kind.value == value), None)


#: Holders that keep the lock for one call only: they let go within seconds.
READERS = frozenset({Holder.QUERY, Holder.STATUS, Holder.DOCTOR, Holder.MCP})

_NAMES = {
    Holder.DAEMON: "the daemon",
    Holder.INDEX: "`vaultd index` or `reindex`",
    Holder.QUERY: "a query answered from the index",
    Holder.STATUS: "`vaultd status`",
    Holder.DOCTOR: "`vaultd doctor`",
    Holder.MCP: "`vaultd mcp` answering from the index",
    Holder.FORGET: "`vaultd forget`",
}


@dataclass(frozen=True, slots=True)
class LockHolder:
    """Who holds (or last held) a lock, as its lock file says."""

    pid: int | None
    #: None: a lock file of the older form (a bare pid), or a kind this version does not know.
    kind: Holder | None

    @classmethod
    def parse(cls, text: str) -> LockHolder:
        text = text.strip()
        if text.isdigit():
            return cls(int(text), None)
        try:
            record = json.loads(text)
        except ValueError:
            return cls(None, None)
        if not isinstance(record, dict):
            return cls(None, None)
        pid = record.get("pid")
        return cls(
            pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
            Holder.named(record.get("holder")),
        )

    def describe(self) -> str:
        """What holds the lock, as much as the file says: "another vaultd process (what it
        is, pid N)"."""
        said = [_NAMES[self.kind]] if self.kind is not None else []
        said += [f"pid {self.pid}"] if self.pid is not None else []
        return "another vaultd process" + (f" ({', '.join(said)})" if said else "")


def read_holder(data_dir: Path) -> LockHolder:
    """Who the lock file says holds (or last held) the lock."""
    try:
        return LockHolder.parse((data_dir / LOCK).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return LockHolder(None, None)


def holder_pid(data_dir: Path) -> int | None:
    """The pid the lock's holder (or its last holder) wrote into the lock file."""
    return read_holder(data_dir).pid


def process_state(pid: int) -> str | None:
    """The state letter of process `pid` as ps(1) shows it ("R", "S", "T" stopped, "t" traced
    ...), or None when there is no such process (or it cannot be seen)."""
    if pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            # The command name, in parentheses, may itself hold ") ": the state follows the last.
            return handle.read().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return None
    except (OSError, IndexError):
        return None
    if sys.platform == "win32":  # pragma: no cover
        return None
    try:  # no /proc (macOS, the BSDs): ps says the same
        done = subprocess.run(
            ["ps", "-o", "state=", "-p", str(pid)],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    found = done.stdout.strip()
    return found[:1] or None


def stopped(pid: int, *, daemon: bool = False) -> DaemonStoppedError | None:
    """The error for a holder `pid` that is stopped (it keeps its lock and answers nothing),
    or None when it runs or is gone. `daemon`: it is known to be the daemon."""
    state = process_state(pid)
    if state in ("T", "t"):
        return DaemonStoppedError(pid, daemon=daemon, traced=state == "t")
    return None


_DATA_DIR_ADVICE = (
    "Set [store] path to a directory of your own (vaultd creates it private), or have "
    "the other user's files removed"
)


def check_data_dir(data_dir: Path, *, tighten: bool = False) -> None:
    """Refuse a data directory (or a directory above it) that another user owns or may write.

    With `tighten`, the directory itself may still be open to others if it is the user's own:
    the caller makes it private (and then checks what is in it).
    """
    check_path(data_dir, "the data directory", _DATA_DIR_ADVICE, tighten=tighten)


def check_data_dir_files(data_dir: Path) -> None:
    """`check_data_dir`, then refuse the directory if another user's files are in it."""
    if data_dir.is_dir():
        check_tree(data_dir, "the data directory", _DATA_DIR_ADVICE, tighten=True)
    else:
        check_data_dir(data_dir, tighten=True)


_STOP = "stop it, or query it through its socket instead"
#: What to do about each holder, in the message that says the lock is taken.
_ADVICE: dict[Holder | None, str] = {
    Holder.INDEX: "wait for it to finish, or stop it (Ctrl-C in its terminal)",
    **{kind: "try again once it is done: it lets go within seconds" for kind in READERS},
}


class DataDirLock:
    """The lock of `data_dir`, taken as `holder`."""

    def __init__(self, data_dir: Path, holder: Holder) -> None:
        self.path = data_dir / LOCK
        self.holder = holder
        self._fd: int | None = None

    def acquire(self) -> None:
        data_dir = self.path.parent
        try:
            # Before anything is created: never make a directory inside another user's.
            check_data_dir(data_dir, tighten=True)
            made = not os.path.lexists(data_dir)
            private_dir(data_dir)
            if made:
                mark_made(data_dir)
            check_tree(data_dir, "the data directory", _DATA_DIR_ADVICE)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            if exc.errno in _UNUSABLE:
                problem = f"{exc.strerror}: {exc.filename}"
                raise unusable(data_dir, problem, exc.errno) from exc
            raise StoreError(f"cannot create the lock file {self.path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = LockHolder.parse(os.pread(fd, 512, 0).decode(errors="replace"))
            os.close(fd)
            daemon = holder.kind is Holder.DAEMON
            halted = None if holder.pid is None else stopped(holder.pid, daemon=daemon)
            if halted is not None:
                raise halted from None
            advice = _ADVICE.get(holder.kind, _STOP)
            raise LockedError(
                f"{holder.describe()} is using {self.path.parent}; {advice}",
                pid=holder.pid,
                holder=holder.kind,
            ) from None
        record = json.dumps({"pid": os.getpid(), "holder": self.holder.value}) + "\n"
        # Written over the old record, then cut to length: never an empty file to read.
        written = os.pwrite(fd, record.encode(), 0)
        os.ftruncate(fd, written)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> DataDirLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
