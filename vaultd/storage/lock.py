"""One process owns a data directory: an advisory `flock` on a file inside it.

The kernel drops the lock when the process dies, however it dies, so a crash never leaves a
stale lock behind.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from types import TracebackType

from vaultd.errors import DataDirError, LockedError, StoreError
from vaultd.layout import LOCK, private_dir

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


class DataDirLock:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK
        self._fd: int | None = None

    def acquire(self) -> None:
        data_dir = self.path.parent
        try:
            private_dir(data_dir)
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
