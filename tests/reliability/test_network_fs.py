"""A vault on a network filesystem (RELIABILITY.md case 13), and a watcher that keeps dying.

No NFS server is available here, so the daemon runs with a `sitecustomize` module (found
through PYTHONPATH) that changes only what cannot be produced for real:
- VDTEST_MOUNTS=LINES: lines added to what vaultd reads as the kernel's mount table, such as
  "filer:/export <vault> nfs4 ...". Everything else (the lookup, the choice of polling, the
  status and the log) is vaultd's own.
- VDTEST_POLL_FAIL=FILE: while FILE exists, watchdog's polling thread fails with ENOTCONN, as
  a share whose server went away does: the running thread ends (as in watchdog #1065 and #452)
  and a new one cannot take its first snapshot.

The restart back-off is also checked in-process, with a clock the test moves by hand.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import threading
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PosixPath
from typing import Any, cast

import pytest

from harness.convergence import assert_converged
from harness.daemon import (
    RunningDaemon,
    fault_env,
    running,
    short_socket_dir,
    wait_until,
    write_config,
)
from vaultd.config import load_config
from vaultd.daemon.lifecycle import Daemon
from vaultd.daemon.state import State
from vaultd.daemon.watching import WATCHER_RETRY_FIRST, Watching
from vaultd.daemon.worker import Worker
from vaultd.pipeline.watch import Watcher

SITECUSTOMIZE = """
import os

_mounts = os.environ.get("VDTEST_MOUNTS")
if _mounts:
    from vaultd.pipeline import watch

    _read_mount_table = watch._mount_table
    watch._mount_table = lambda: _read_mount_table() + _mounts

_fail = os.environ.get("VDTEST_POLL_FAIL")
if _fail:
    import errno

    from watchdog.observers import polling

    def _unreachable():
        if os.path.exists(_fail):
            raise OSError(errno.ENOTCONN, os.strerror(errno.ENOTCONN), _fail)

    _queue_events = polling.PollingEmitter.queue_events
    _first_snapshot = polling.PollingEmitter.on_thread_start

    def queue_events(self, timeout):
        _unreachable()
        return _queue_events(self, timeout)

    def on_thread_start(self):
        _unreachable()
        return _first_snapshot(self)

    polling.PollingEmitter.queue_events = queue_events
    polling.PollingEmitter.on_thread_start = on_thread_start
"""


def patched(tmp_path: Path, **settings: str) -> dict[str, str]:
    return fault_env(tmp_path, SITECUSTOMIZE, **settings)


def on_nfs(vault: Path) -> str:
    return f"filer:/export/notes {os.path.realpath(vault)} nfs4 rw,relatime,vers=4.2 0 0\n"


def note(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {path.stem}\n\n{text}\n")


def make_vault(root: Path) -> Path:
    vault = root / "vault"
    note(vault / "alpha.md", "An ordinary note called alpha.")
    note(vault / "sub" / "bravo.md", "An ordinary note called bravo.")
    return vault


def status(daemon: RunningDaemon) -> dict[str, Any]:
    answer: dict[str, Any] = daemon.request("GET", "/v1/status")
    return answer


def log_events(daemon: RunningDaemon, event: str) -> list[dict[str, Any]]:
    found = []
    for line in daemon.log_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("event") == event:
                found.append(record)
    return found


def at(record: dict[str, Any]) -> float:
    return datetime.fromisoformat(record["timestamp"]).timestamp()


def test_a_vault_on_nfs_is_polled_says_why_and_converges(tmp_path: Path) -> None:
    vault = make_vault(tmp_path)
    env = patched(tmp_path, VDTEST_MOUNTS=on_nfs(vault))
    with running(vault, tmp_path, env=env) as daemon:
        watch = status(daemon)["watch"]
        assert watch["mode"] == "polling"
        reason = watch["fallback_reason"]
        assert f"network filesystem (nfs4, mounted at {os.path.realpath(vault)})" in reason
        assert "not those made by the server, other machines" in reason
        warnings = log_events(daemon, "watching by polling")
        assert len(warnings) == 1 and warnings[0]["reason"] == reason
        # "started" is logged just after the socket first answers.
        wait_until(lambda: bool(log_events(daemon, "started")), "the daemon logs its start")
        assert log_events(daemon, "started")[0]["watch"] == "polling"
        # Polling is not a fault: health stays ok.
        assert daemon.request("GET", "/v1/health")["status"] == "ok"

        note(vault / "sub" / "quokka.md", "A new note about the quokka.")
        note(vault / "alpha.md", "An ordinary note called alpha, now about the zymurgy.")
        (vault / "sub" / "bravo.md").rename(vault / "bravo.md")
        for word, path in (("quokka", "sub/quokka.md"), ("zymurgy", "alpha.md")):
            hits = daemon.search(word, mode="keyword", wait_for=path)
            assert [h["path"] for h in hits] == [path]
        hits = daemon.search("bravo", mode="keyword", wait_for="bravo.md")
        assert [h["path"] for h in hits] == ["bravo.md"]
        assert_converged(daemon, vault, tmp_path)


def test_a_polling_thread_that_keeps_dying_is_restarted_with_growing_gaps(tmp_path: Path) -> None:
    vault = make_vault(tmp_path)
    outage = tmp_path / "server-down"
    env = patched(tmp_path, VDTEST_MOUNTS=on_nfs(vault), VDTEST_POLL_FAIL=str(outage))
    with running(vault, tmp_path, env=env) as daemon:
        assert status(daemon)["watch"]["mode"] == "polling"
        daemon.wait_idle()

        outage.touch()  # the server goes away: the polling thread ends at its next poll
        stopped = "the file watcher stopped; restarting it and reconciling"
        wait_until(
            lambda: bool(log_events(daemon, stopped)),
            "the dead polling thread is noticed",
        )
        health = daemon.request("GET", "/v1/health")
        assert health["status"] == "degraded" and "watch" in health["reason"], health
        # Written while nothing watches: only the reconcile after the restart can find it.
        note(vault / "sub" / "quokka.md", "A note about the quokka, written during the outage.")
        failing = "cannot restart the file watcher; retrying"
        wait_until(lambda: len(log_events(daemon, failing)) >= 2, "two restarts have failed")
        outage.unlink()  # the server is back: the third restart succeeds

        wait_until(
            lambda: bool(log_events(daemon, "the file watcher is running again")),
            "the watcher is restarted",
        )
        hits = daemon.search("quokka", mode="keyword", wait_for="sub/quokka.md")
        assert [h["path"] for h in hits] == ["sub/quokka.md"]
        assert daemon.request("GET", "/v1/health")["status"] == "ok"
        assert status(daemon)["watch"]["mode"] == "polling"

        died = log_events(daemon, stopped)
        failed = log_events(daemon, failing)
        back = log_events(daemon, "the file watcher is running again")
        assert len(died) == 1 and len(failed) == 2 and len(back) == 1, daemon.log_text()
        assert [r["retry_in"] for r in [*died, *failed]] == [1, 2, 4]
        assert "Transport endpoint is not connected" in failed[0]["error"]
        times = [at(r) for r in [died[0], *failed, back[0]]]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        # 1 s, then 2, then 4, give or take the main loop's quarter-second tick.
        for gap, wanted in zip(gaps, (1, 2, 4), strict=True):
            assert wanted - 0.05 <= gap <= wanted + 0.75, gaps

        # From then on, changes are polled again.
        note(vault / "alpha.md", "An ordinary note called alpha, now about the zymurgy.")
        hits = daemon.search("zymurgy", mode="keyword", wait_for="alpha.md")
        assert [h["path"] for h in hits] == ["alpha.md"]
        assert_converged(daemon, vault, tmp_path)


# -- the back-off, with a clock moved by hand ----------------------------------------------------


@dataclass
class FlakyWatcher:
    """Stands in for the Watcher: dies when told, and fails to start while `failing`."""

    running: bool = True
    failing: bool = False
    mode: str = "polling"
    fallback_reason: str = ""
    attempts: int = 0

    def alive(self) -> bool:
        return self.running

    def stop(self) -> None:
        self.running = False

    def start(self) -> None:
        self.attempts += 1
        if self.failing:
            raise OSError(errno.ENOTCONN, os.strerror(errno.ENOTCONN))
        self.running = True


@dataclass
class StillWorker:
    paused: bool = False
    full_requests: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def request_full(self) -> None:
        self.full_requests += 1

    def is_alive(self) -> bool:
        return True


def supervised(tmp_path: Path) -> tuple[Daemon, FlakyWatcher, StillWorker]:
    config = write_config(
        tmp_path / "vaultd.toml", tmp_path / "vault", tmp_path / "data", short_socket_dir() / "s"
    )
    daemon = Daemon(load_config(config, env={}), env={})
    watcher, worker = FlakyWatcher(), StillWorker()
    daemon.watcher = cast(Watcher, watcher)
    daemon.worker = cast(Worker, worker)
    daemon.state.started()
    return daemon, watcher, worker


def tick_until(
    daemon: Daemon, watcher: FlakyWatcher, start: float, end: float
) -> tuple[list[float], float]:
    """Run the main loop's watcher check every quarter second; the times it tried a start."""
    tried: list[float] = []
    now = start
    while now < end:
        before = watcher.attempts
        daemon.watching.check_watcher(watcher, daemon.worker, now)
        if watcher.attempts != before:
            tried.append(now)
        now += 0.25
    return tried, now


def test_a_watcher_that_keeps_dying_is_retried_after_1_2_4_up_to_60_seconds(
    tmp_path: Path,
) -> None:
    daemon, watcher, worker = supervised(tmp_path)
    tick_until(daemon, watcher, 0, 10)
    assert watcher.attempts == 0

    watcher.running, watcher.failing = False, True  # dies at 10 and cannot be restarted
    tried, now = tick_until(daemon, watcher, 10, 400)
    assert tried == [11, 13, 17, 25, 41, 73, 133, 193, 253, 313, 373]
    reasons = daemon.state.snapshot()["reasons"]
    assert "Transport endpoint is not connected" in reasons["watch"]
    assert "retrying in 60 s" in reasons["watch"]
    assert daemon.state.snapshot()["status"] == "degraded"
    assert worker.full_requests == 0

    watcher.failing = False  # the share is back: the next attempt succeeds
    tried, now = tick_until(daemon, watcher, now, 440)
    assert tried == [433]
    assert watcher.running and worker.full_requests == 1  # what was missed is reconciled
    assert daemon.state.snapshot()["status"] == "ok"

    # Dying again soon after a restart continues the row: still 60 s.
    watcher.running = False
    tried, now = tick_until(daemon, watcher, now, 505)
    assert tried == [500]

    # After a minute of running it is healthy again: the next death waits 1 s.
    tick_until(daemon, watcher, now, now + 60)
    watcher.running = False
    tried, _ = tick_until(daemon, watcher, 700, 705)
    assert tried == [701]
    assert worker.full_requests == 3


def test_a_restarted_watcher_queues_what_it_missed_before_the_daemon_is_healthy(
    tmp_path: Path,
) -> None:
    """A daemon read as healthy between the two was idle with the dead watcher's events
    still to reconcile: a client waiting for "ok" and then for idle searched an index that
    had missed them."""
    worker = StillWorker()
    queued_at_recovery: list[int] = []

    class Recording(State):
        def recover(self, key: str) -> None:
            if key == "watch":
                queued_at_recovery.append(worker.full_requests)
            super().recover(key)

    watching = Watching(Recording())
    watching.state.started()
    watcher = FlakyWatcher(running=False)
    watching.check_watcher(cast(Watcher, watcher), cast(Worker, worker), 0.0)
    assert watching.state.snapshot()["status"] == "degraded"
    watching.check_watcher(cast(Watcher, watcher), cast(Worker, worker), WATCHER_RETRY_FIRST)
    assert watcher.running and watching.state.snapshot()["status"] == "ok"
    assert queued_at_recovery == [1]


def test_no_restart_while_the_vault_root_is_missing_and_one_when_it_returns(
    tmp_path: Path,
) -> None:
    daemon, watcher, worker = supervised(tmp_path)
    root = tmp_path / "vault"
    root.mkdir()
    daemon.watching.check_root(root, watcher, worker)
    root.rmdir()
    daemon.watching.check_root(root, watcher, worker)
    assert worker.paused and not watcher.running
    tried, _ = tick_until(daemon, watcher, 0, 100)
    assert tried == []  # stopped on purpose, not dead
    assert daemon.alive()  # and so the watchdog pings go on
    root.mkdir()
    daemon.watching.check_root(root, watcher, worker)
    assert not worker.paused and watcher.running and worker.full_requests == 1
    assert daemon.state.snapshot()["status"] == "ok"


def test_an_unreachable_vault_root_pauses_instead_of_crashing(tmp_path: Path) -> None:
    """A share whose server is gone answers stat() with ENOTCONN or EIO, not ENOENT."""
    if os.name != "posix":
        pytest.skip("a POSIX path stands in for the share")
    daemon, watcher, worker = supervised(tmp_path)
    root = tmp_path / "vault"
    root.mkdir()
    lost = threading.Event()

    class Share(PosixPath):
        def lstat(self) -> os.stat_result:
            if lost.is_set():
                raise OSError(errno.ENOTCONN, os.strerror(errno.ENOTCONN), str(self))
            return super().lstat()

    share = Share(root)
    lost.set()
    daemon.watching.check_root(share, watcher, worker)
    assert worker.paused and not watcher.running
    reason = daemon.state.snapshot()["reasons"]["vault"]
    assert "cannot be reached" in reason and "Transport endpoint is not connected" in reason
    lost.clear()
    daemon.watching.check_root(share, watcher, worker)
    assert not worker.paused and watcher.running and worker.full_requests == 1
    assert daemon.state.snapshot()["status"] == "ok"
