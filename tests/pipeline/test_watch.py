"""The watcher turns real watchdog events into settled paths, without needless rescans."""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from vaultd.pipeline import watch
from vaultd.pipeline.watch import (
    Settled,
    Watcher,
    filesystem_of,
    network_filesystem,
)

#: How long a wait for the watcher may take before it is a failure (the machine is shared).
PATIENCE = 120.0


def settled_until(watcher: Watcher, last: str, timeout: float = PATIENCE) -> Settled:
    """Everything handed over until `last`, written after the rest, is (without `last`).

    Events arrive in order, and `last` is the newest: once it has settled, so has what came
    before it.
    """
    deadline = time.monotonic() + timeout
    out = Settled()
    while last not in out.paths:
        assert time.monotonic() < deadline, f"timed out waiting until {last} settles"
        got = watcher.take()
        out.paths |= got.paths
        out.dirs |= got.dirs
        out.full = out.full or got.full
        time.sleep(0.05)
    out.paths.discard(last)
    return out


def test_saving_a_note_at_the_root_is_one_path_not_a_full_rescan(tmp_path: Path) -> None:
    watcher = Watcher(tmp_path, settle=0.2, is_ignored=lambda p, d: p.startswith("."))
    watcher.start()
    try:
        (tmp_path / "a.md").write_text("one")
        tmp = tmp_path / ".a.md.tmp"
        tmp.write_text("two")
        os.replace(tmp, tmp_path / "a.md")  # an atomic save
        (tmp_path / "sub").mkdir()
        (tmp_path / "sub" / "b.md").write_text("three")
        (tmp_path / "last.md").write_text("written after the rest")
        got = settled_until(watcher, "last.md")
    finally:
        watcher.stop()
    assert not got.full
    assert got.paths == {"a.md", "sub/b.md"}
    assert got.dirs == {"sub"}


def test_a_name_that_is_not_utf8_is_handed_over_apart_from_the_notes(tmp_path: Path) -> None:
    watcher = Watcher(tmp_path, settle=0.2)
    watcher.start()
    try:
        raw = os.fsencode(tmp_path)
        for name in (b"caf\xe9.md", b"caf\xe9.txt"):  # the second is no note either way
            with open(os.path.join(raw, name), "w") as fh:
                fh.write("x")
        os.mkdir(os.path.join(raw, b"dir\xff"))
        (tmp_path / "last.md").write_text("written after the rest")
        deadline = time.monotonic() + PATIENCE
        got = Settled()
        while "last.md" not in got.paths:
            assert time.monotonic() < deadline, "timed out waiting until last.md settles"
            taken = watcher.take()
            got.paths |= taken.paths
            got.undecodable |= taken.undecodable
            time.sleep(0.05)
    finally:
        watcher.stop()
    # Never among the paths a manifest query carries; handed over to be reported.
    assert got.paths == {"last.md"}
    assert got.undecodable == {os.fsdecode(b"caf\xe9.md"), os.fsdecode(b"dir\xff")}


def test_events_are_held_until_the_path_is_quiet(tmp_path: Path) -> None:
    watcher = Watcher(tmp_path, settle=0.5)
    watcher.start()
    try:
        note = tmp_path / "busy.md"
        early: set[str] = set()
        written: list[float] = []
        for i in range(8):  # a note rewritten several times a second
            note.write_text(f"version {i}")
            written.append(time.monotonic())
            time.sleep(0.1)
            taken = watcher.take().paths
            # Held while the note has been quiet for less than the settle time. The watcher
            # dates an event by its arrival, at or after its write, and may not have this one
            # or the one before yet: reckoned from the write before those, the note is quiet
            # for less than this. (A loaded machine can stretch the pauses past the settle
            # time; then the note may settle, rightly.)
            if time.monotonic() - written[max(0, i - 2)] < 0.5:
                assert "busy.md" not in taken, i
            early |= taken
        (tmp_path / "last.md").write_text("written after the rest")
        got = settled_until(watcher, "last.md")
        assert got.paths | early == {"busy.md"}
    finally:
        watcher.stop()


# -- the inotify watch limit --------------------------------------------------------------------

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


def limit_watches(monkeypatch: pytest.MonkeyPatch, limit: int) -> None:
    """inotify_add_watch fails with ENOSPC past `limit` folders, as at max_user_watches.

    The kernel's limit is global to the machine, so it is simulated (as watchdog's own tests
    do) rather than lowered.
    """
    from watchdog.observers import inotify_c

    add_watch = inotify_c.inotify_add_watch
    watched: set[bytes] = set()

    def limited(fd: int, path: bytes, mask: int) -> int:
        if path not in watched and len(watched) >= limit:
            ctypes.set_errno(errno.ENOSPC)
            return -1
        watched.add(path)
        return add_watch(fd, path, mask)

    monkeypatch.setattr(inotify_c, "inotify_add_watch", limited)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = PATIENCE) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


@linux_only
def test_a_folder_below_the_root_beyond_the_watch_limit_means_polling_from_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    limit_watches(monkeypatch, 2)  # the root and sub/, not sub/deeper/
    watcher = Watcher(tmp_path, settle=0.2)
    watcher.start()
    try:
        assert watcher.mode == "polling"
        assert "fs.inotify.max_user_watches" in watcher.fallback_reason
        assert "inotify watch limit reached" in watcher.fallback_reason
        (tmp_path / "sub" / "deeper" / "n.md").write_text("seen by polling")
        wait_for(lambda: "sub/deeper/n.md" in watcher.take().paths, "the new note is seen")
    finally:
        watcher.stop()


@linux_only
def test_the_native_backend_refuses_to_leave_a_folder_unwatched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sub").mkdir()
    limit_watches(monkeypatch, 1)
    watcher = Watcher(tmp_path, settle=0.2, backend="native")
    threads = threading.active_count()
    with pytest.raises(OSError) as raised:
        watcher.start()
    assert raised.value.errno == errno.ENOSPC
    assert watcher.mode == "" and not watcher.alive()
    # The failed start's inotify reader does not linger.
    wait_for(lambda: threading.active_count() <= threads, "the inotify reader stops")
    watcher.stop()


@linux_only
@pytest.mark.parametrize("arrival", ["created", "moved in"])
def test_a_folder_arriving_beyond_the_watch_limit_switches_to_polling_and_reconciles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arrival: str
) -> None:
    vault = tmp_path / "vault"
    (vault / "sub").mkdir(parents=True)
    outside = tmp_path / "outside"
    (outside / "inner").mkdir(parents=True)
    (outside / "inner" / "old.md").write_text("written before it moved in")
    limit_watches(monkeypatch, 2)  # the root and sub/
    watcher = Watcher(vault, settle=0.2)
    watcher.start()
    try:
        assert watcher.mode == "native" and not watcher.fallback_reason
        if arrival == "created":
            (vault / "new" / "inner").mkdir(parents=True)
        else:
            outside.rename(vault / "new")
        wait_for(lambda: watcher.mode == "polling", "the watcher falls back to polling")
        assert "fs.inotify.max_user_watches" in watcher.fallback_reason
        assert watcher.alive()
        # What happened in the unwatched folder before polling began is not lost.
        assert watcher.take(force=True).full
        (vault / "new" / "inner" / "later.md").write_text("seen by polling")
        wait_for(lambda: "new/inner/later.md" in watcher.take().paths, "the new note is seen")
    finally:
        watcher.stop()
    assert watcher.mode == ""


# -- network filesystems ------------------------------------------------------------------------


def mount_table(monkeypatch: pytest.MonkeyPatch, *lines: str) -> None:
    """The kernel's mount table, as /proc/self/mounts would read (no NFS server here)."""
    monkeypatch.setattr(watch, "_mount_table", lambda: "".join(f"{line}\n" for line in lines))


LOCAL_ROOT = "/dev/sda1 / ext4 rw,relatime 0 0"


def test_a_vault_on_a_network_filesystem_is_polled_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    point = os.path.realpath(vault)
    mount_table(monkeypatch, LOCAL_ROOT, f"filer:/export/notes {point} nfs4 rw,vers=4.2 0 0")
    watcher = Watcher(vault, settle=0.2)
    watcher.start()
    try:
        assert watcher.mode == "polling"
        assert "network filesystem (nfs4, mounted at " + point + ")" in watcher.fallback_reason
        assert "changes made on this machine" in watcher.fallback_reason
        (vault / "n.md").write_text("seen by polling")
        wait_for(lambda: "n.md" in watcher.take().paths, "the new note is seen")
    finally:
        watcher.stop()


@pytest.mark.parametrize("backend", ["native", "polling"])
def test_an_explicit_backend_is_kept_on_a_network_filesystem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: watch.Backend
) -> None:
    if backend == "native" and not sys.platform.startswith("linux"):
        pytest.skip("native watching here is not inotify")
    mount_table(monkeypatch, f"filer:/export {os.path.realpath(tmp_path)} nfs rw 0 0")
    watcher = Watcher(tmp_path, settle=0.2, backend=backend)
    watcher.start()
    try:
        assert watcher.mode == backend and watcher.fallback_reason == ""
    finally:
        watcher.stop()


@pytest.mark.parametrize(
    ("kind", "network"),
    [
        ("nfs", True),
        ("nfs4", True),
        ("cifs", True),
        ("smb3", True),
        ("smbfs", True),
        ("fuse.sshfs", True),
        ("fuse.rclone", True),
        ("9p", True),
        ("virtiofs", True),
        ("ceph", True),
        ("ext4", False),
        ("btrfs", False),
        ("tmpfs", False),
        ("overlay", False),
        ("fuse.mergerfs", False),
        ("fuseblk", False),
    ],
)
def test_which_filesystems_are_network_ones(
    monkeypatch: pytest.MonkeyPatch, kind: str, network: bool
) -> None:
    mount_table(monkeypatch, LOCAL_ROOT, f"src /mnt/notes {kind} rw 0 0")
    found = network_filesystem(Path("/mnt/notes/vault"))
    assert found == ((kind, "/mnt/notes") if network else None)


def test_the_mount_point_that_holds_the_vault_is_the_longest_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mount_table(
        monkeypatch,
        LOCAL_ROOT,
        "filer:/a /mnt/share nfs4 rw 0 0",
        "/dev/sdb1 /mnt/share-local ext4 rw 0 0",  # a longer name, not below /mnt/share
        "//nas/notes /mnt/share/smb cifs rw 0 0",
        r"host:/x /mnt/my\040notes fuse.sshfs rw 0 0",  # a space, as the kernel writes it
        "/dev/sdc1 /srv ext4 rw 0 0",
        "filer:/srv /srv nfs rw 0 0",  # mounted over the first: the one on top counts
    )
    assert filesystem_of(Path("/home/me/vault")) == ("ext4", "/")
    assert filesystem_of(Path("/mnt/share")) == ("nfs4", "/mnt/share")
    assert filesystem_of(Path("/mnt/share/vault")) == ("nfs4", "/mnt/share")
    assert filesystem_of(Path("/mnt/share-local/vault")) == ("ext4", "/mnt/share-local")
    assert filesystem_of(Path("/mnt/share/smb/vault")) == ("cifs", "/mnt/share/smb")
    assert filesystem_of(Path("/mnt/my notes/vault")) == ("fuse.sshfs", "/mnt/my notes")
    assert filesystem_of(Path("/srv/vault")) == ("nfs", "/srv")


def test_without_a_mount_table_nothing_is_assumed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mount_table(monkeypatch)  # as on macOS, where there is no /proc
    assert filesystem_of(tmp_path) is None
    assert network_filesystem(tmp_path) is None


@linux_only
def test_the_real_mount_table_is_read(tmp_path: Path) -> None:
    found = filesystem_of(tmp_path)
    assert found is not None
    kind, point = found
    real = os.path.realpath(tmp_path)
    assert kind and (point == "/" or real == point or real.startswith(point + "/"))


# -- a watcher whose emitter thread died ---------------------------------------------------------


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_polling_thread_means_the_watcher_is_not_alive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Older watchdog releases end the polling thread on EBUSY or ENOTCONN (#1065, #452)
    while the observer thread, which only dispatches, runs on: nothing is reported again."""
    from watchdog.observers.polling import PollingEmitter

    broken = threading.Event()
    queue_events = PollingEmitter.queue_events

    def failing(self: PollingEmitter, timeout: float) -> None:
        if broken.is_set():
            raise OSError(errno.ENOTCONN, os.strerror(errno.ENOTCONN), str(tmp_path))
        queue_events(self, timeout)

    monkeypatch.setattr(PollingEmitter, "queue_events", failing)
    watcher = Watcher(tmp_path, settle=0.2, backend="polling")
    watcher.start()
    try:
        assert watcher.alive()
        broken.set()
        wait_for(lambda: not watcher.alive(), "the watcher reports the dead thread")
        broken.clear()
        watcher.stop()
        watcher.start()
        assert watcher.alive()
        (tmp_path / "n.md").write_text("seen again")
        wait_for(lambda: "n.md" in watcher.take().paths, "the restarted watcher reports again")
    finally:
        watcher.stop()
