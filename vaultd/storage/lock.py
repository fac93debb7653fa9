"""One process owns a data directory: an advisory `flock` on a file inside it.

The kernel drops the lock when the process dies, however it dies, so a crash never leaves a
stale lock behind. A holder that is alive but stopped (SIGSTOP) keeps it: that is said as such.

Taking the lock is also where a data directory is claimed: one that another user owns or can
write, or that holds their files, is refused before anything in it is opened (vaultd.trust).
"""

from __future__ import annotations

import errno
import fcntl
import os
import subprocess
import sys
from pathlib import Path
from types import TracebackType

from vaultd.errors import DaemonStoppedError, DataDirError, LockedError, StoreError
from vaultd.layout import LOCK, private_dir
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


def holder_pid(data_dir: Path) -> int | None:
    """The pid the lock's holder (or its last holder) wrote into the lock file."""
    try:
        return int((data_dir / LOCK).read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None


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


class DataDirLock:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK
        self._fd: int | None = None

    def acquire(self) -> None:
        data_dir = self.path.parent
        try:
            # Before anything is created: never make a directory inside another user's.
            check_data_dir(data_dir, tighten=True)
            private_dir(data_dir)
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
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            halted = stopped(int(holder)) if holder.isdigit() else None
            if halted is not None:
                raise halted from None
            who = f" (pid {holder})" if holder else ""
            raise LockedError(
                f"another vaultd process{who} is using {self.path.parent}; stop it, or query it "
                "through its socket instead"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
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
