"""storage/lock: one process owns a data directory, and a second is told who holds it."""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from vaultd.errors import DaemonStoppedError, DataDirError, LockedError
from vaultd.layout import LOCK
from vaultd.storage import lock
from vaultd.storage.lock import DataDirLock, Holder, LockHolder


def test_the_holder_writes_its_pid_and_kind_into_a_private_directory(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with DataDirLock(data_dir, Holder.QUERY):
        assert lock.holder_pid(data_dir) == os.getpid()
        assert lock.read_holder(data_dir) == LockHolder(os.getpid(), Holder.QUERY)
        assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE((data_dir / LOCK).stat().st_mode) == 0o600


def test_a_second_taker_is_refused_until_the_lock_is_released(tmp_path: Path) -> None:
    with DataDirLock(tmp_path, Holder.DAEMON):
        said = f"another vaultd process \\(the daemon, pid {os.getpid()}\\) is using"
        with pytest.raises(LockedError, match=said) as refused:
            DataDirLock(tmp_path, Holder.INDEX).acquire()
        assert not isinstance(refused.value, DaemonStoppedError)
        # What holds it travels in fields, for the taker to act on.
        assert (refused.value.pid, refused.value.holder) == (os.getpid(), "daemon")
    again = DataDirLock(tmp_path, Holder.INDEX)
    again.acquire()
    again.release()
    again.release()  # a second release does nothing


def _wait_for(condition: Callable[[], bool], limit: float = 30.0) -> None:
    """A signal reaches a process a moment after `kill` returns."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.01)


def test_a_stopped_holder_is_named_as_stopped(tmp_path: Path) -> None:
    child = subprocess.Popen(["sleep", "60"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        _wait_for(lambda: lock.process_state(child.pid) == "T")
        with DataDirLock(tmp_path, Holder.INDEX):
            # As if the stopped process had taken it: the pid in the file is what is checked.
            (tmp_path / LOCK).write_text(f"{child.pid}\n")
            with pytest.raises(DaemonStoppedError) as refused:
                DataDirLock(tmp_path, Holder.DAEMON).acquire()
        assert refused.value.pid == child.pid
        assert lock.stopped(child.pid) is not None
        os.kill(child.pid, signal.SIGCONT)
        _wait_for(lambda: lock.stopped(child.pid) is None)
    finally:
        child.kill()
        child.wait()


def test_a_lock_file_of_the_older_form_is_read_and_its_holder_refused_as_before(
    tmp_path: Path,
) -> None:
    """A bare pid, as vaultd wrote before holders said what they are: the pid is read, the kind
    is unknown, and a taker is refused at once with the words it was refused with before."""
    with DataDirLock(tmp_path, Holder.INDEX):
        (tmp_path / LOCK).write_text(f"{os.getpid()}\n")
        assert lock.holder_pid(tmp_path) == os.getpid()
        assert lock.read_holder(tmp_path) == LockHolder(os.getpid(), None)
        with pytest.raises(LockedError) as refused:
            DataDirLock(tmp_path, Holder.DAEMON).acquire()
    assert str(refused.value).startswith(f"another vaultd process (pid {os.getpid()}) is using")
    assert "query it through its socket" in str(refused.value)
    assert (refused.value.pid, refused.value.holder) == (os.getpid(), None)


@pytest.mark.parametrize(
    ("text", "holder"),
    [
        ('{"pid": 12, "holder": "status"}', LockHolder(12, Holder.STATUS)),
        ('{"pid": 12, "holder": "a kind from a later version"}', LockHolder(12, None)),
        ('{"pid": true, "holder": "query"}', LockHolder(None, Holder.QUERY)),
        ("[12]", LockHolder(None, None)),
        ("", LockHolder(None, None)),
        ("not a record", LockHolder(None, None)),
    ],
)
def test_lock_records_are_read_field_by_field(text: str, holder: LockHolder) -> None:
    assert LockHolder.parse(text) == holder


def test_process_state_of_this_process_and_of_none() -> None:
    assert lock.process_state(os.getpid()) == "R"
    assert lock.process_state(0) is None
    assert lock.holder_pid(Path("/nonexistent")) is None


def test_a_file_where_the_directory_must_be_is_a_data_dir_error(tmp_path: Path) -> None:
    in_the_way = tmp_path / "data"
    in_the_way.write_text("")
    with pytest.raises(DataDirError, match="a file stands where a directory must be"):
        DataDirLock(in_the_way, Holder.INDEX).acquire()


def test_unusable_says_what_to_do_for_each_cause(tmp_path: Path) -> None:
    denied = lock.unusable(tmp_path, "Permission denied", errno.EACCES)
    assert "give your user write access" in str(denied)
    assert not denied.read_only
    assert lock.unusable(tmp_path, "Read-only file system", errno.EROFS).read_only
    assert "another directory" in str(lock.unusable(tmp_path, "too long", errno.ENAMETOOLONG))
    assert not lock.read_only(tmp_path / "not" / "yet")
