"""sd_notify for real: `Notifier` and `vaultd run` talking to a real AF_UNIX datagram socket.

The listener plays systemd's part: it binds the socket named by $NOTIFY_SOCKET and, like
systemd with `NotifyAccess=main`, reads the sender's pid from SCM_CREDENTIALS.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from harness.convergence import assert_converged
from harness.daemon import (
    PATIENCE,
    RunningDaemon,
    short_socket_dir,
    start,
    wait_until,
    write_config,
)
from vaultd.config import load_config
from vaultd.daemon.lifecycle import STOP_TIMEOUT, Daemon
from vaultd.daemon.notify import Notifier
from vaultd.daemon.worker import Worker
from vaultd.index.open import Index
from vaultd.pipeline.watch import Watcher
from vaultd.storage.manifest import Manifest

LINUX = sys.platform.startswith("linux")
PASSCRED = getattr(socket, "SO_PASSCRED", None)
CREDENTIALS = getattr(socket, "SCM_CREDENTIALS", None)
_UCRED = struct.Struct("3i")  # pid, uid, gid
#: What `Listener.drain` sends itself; never among the messages it reports.
DRAIN = "VDTEST_DRAIN="


@dataclass(frozen=True)
class Message:
    at: float  # time.monotonic() when it arrived
    raw: str
    pid: int | None  # the sender, when the platform passes credentials

    @property
    def fields(self) -> dict[str, str]:
        return dict(line.split("=", 1) for line in self.raw.splitlines() if "=" in line)


class Listener:
    """A bound datagram socket that records every notification in a background thread."""

    def __init__(self, address: str) -> None:
        self.address = address  # what goes into $NOTIFY_SOCKET
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if PASSCRED is not None:
            self._sock.setsockopt(socket.SOL_SOCKET, PASSCRED, 1)
        self._bound = "\0" + address[1:] if address.startswith("@") else address
        self._sock.bind(self._bound)
        self._sock.settimeout(0.05)
        self._messages: list[Message] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="notify-listener", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        space = socket.CMSG_SPACE(_UCRED.size)
        while not self._stop.is_set():
            try:
                data, ancillary, _flags, _addr = self._sock.recvmsg(4096, space)
            except TimeoutError:
                continue
            except OSError:
                return
            pid = None
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == CREDENTIALS:
                    pid = _UCRED.unpack(payload[: _UCRED.size])[0]
            with self._lock:
                self._messages.append(Message(time.monotonic(), data.decode(), pid))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()

    def mark(self) -> int:
        with self._lock:
            return len(self._messages)

    def messages(self, since: int = 0, pid: int | None = None) -> list[Message]:
        with self._lock:
            found = self._messages[since:]
        found = [m for m in found if not m.raw.startswith(DRAIN)]
        return [m for m in found if pid is None or m.pid is None or m.pid == pid]

    def drain(self) -> None:
        """Wait until every notification sent so far is recorded: a datagram this listener
        sends itself now is queued behind them."""
        token = f"{DRAIN}{uuid.uuid4().hex}"
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            sender.sendto(token.encode(), self._bound)

        def arrived() -> bool:
            with self._lock:
                return any(m.raw == token for m in self._messages)

        wait_until(arrived, "the listener has read what was sent before")

    def wait_for(
        self,
        check: Callable[[list[Message]], bool],
        what: str,
        *,
        since: int = 0,
        timeout: float = PATIENCE,
    ) -> list[Message]:
        deadline = time.monotonic() + timeout
        while True:
            found = self.messages(since)
            if check(found):
                return found
            if time.monotonic() > deadline:
                pytest.fail(f"no {what} within {timeout} s; got {[m.raw for m in found]}")
            time.sleep(0.02)

    def next(self, since: int, timeout: float = PATIENCE) -> Message:
        return self.wait_for(bool, "notification", since=since, timeout=timeout)[0]


def has(key: str, value: str = "1") -> Callable[[Message], bool]:
    return lambda m: m.fields.get(key) == value


def index_of(messages: list[Message], match: Callable[[Message], bool], start: int = 0) -> int:
    return next((i for i, m in enumerate(messages) if i >= start and match(m)), -1)


def sequence(*matches: Callable[[Message], bool]) -> Callable[[list[Message]], bool]:
    """True once the messages contain these, in this order (others may come between)."""

    def check(messages: list[Message]) -> bool:
        position = 0
        for match in matches:
            found = index_of(messages, match, position)
            if found < 0:
                return False
            position = found + 1
        return True

    return check


@pytest.fixture
def listener() -> Iterator[Listener]:
    directory = short_socket_dir()
    bound = Listener(str(directory / "notify"))
    yield bound
    bound.close()
    shutil.rmtree(directory, ignore_errors=True)


# -- Notifier against a real socket ------------------------------------------------------------


def notifier_for(listener: Listener, **env: str) -> Notifier:
    return Notifier({"NOTIFY_SOCKET": listener.address, **env})


def test_ready_with_status(listener: Listener) -> None:
    notifier = notifier_for(listener)
    assert notifier.enabled
    notifier.ready("indexing ~/Notes")
    message = listener.next(0)
    assert message.raw == "READY=1\nSTATUS=indexing ~/Notes"
    if PASSCRED is not None:
        assert message.pid == os.getpid()  # what systemd checks for NotifyAccess=main
    mark = listener.mark()
    notifier.ready()
    assert listener.next(mark).raw == "READY=1"


@pytest.mark.parametrize(
    ("send", "expected"),
    [
        (Notifier.stopping, "STOPPING=1"),
        (Notifier.watchdog, "WATCHDOG=1"),
        (lambda n: n.status("3 notes queued"), "STATUS=3 notes queued"),
    ],
)
def test_one_line_messages(
    listener: Listener, send: Callable[[Notifier], None], expected: str
) -> None:
    send(notifier_for(listener))
    assert listener.next(0).raw == expected


def test_reloading_carries_monotonic_usec(listener: Listener) -> None:
    before = time.monotonic_ns() // 1000
    notifier_for(listener).reloading()
    after = time.monotonic_ns() // 1000
    message = listener.next(0)
    assert message.raw.splitlines()[0] == "RELOADING=1"
    # CLOCK_MONOTONIC, in microseconds, taken when the reload began (systemd compares it).
    assert before <= int(message.fields["MONOTONIC_USEC"]) <= after


@pytest.mark.skipif(not LINUX, reason="the abstract socket namespace exists only on Linux")
def test_abstract_namespace_socket() -> None:
    bound = Listener(f"@vaultd-test-{uuid.uuid4().hex}")
    try:
        notifier = Notifier({"NOTIFY_SOCKET": bound.address})
        notifier.ready()
        notifier.watchdog()
        notifier.stopping()
        found = bound.wait_for(lambda ms: len(ms) >= 3, "three notifications")
        assert [m.raw for m in found] == ["READY=1", "WATCHDOG=1", "STOPPING=1"]
    finally:
        bound.close()


def test_no_op_without_notify_socket(listener: Listener) -> None:
    notifier = Notifier({})
    assert not notifier.enabled
    assert notifier.watchdog_interval is None
    assert notifier.send("READY=1") is False
    notifier.ready("x")
    notifier.reloading()
    notifier.watchdog()
    notifier.stopping()
    assert Notifier({"NOTIFY_SOCKET": ""}).send("READY=1") is False
    listener.drain()
    assert listener.messages() == []


def test_a_vanished_manager_is_not_an_error(tmp_path: Path) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": str(tmp_path / "gone")})
    assert notifier.enabled
    assert notifier.send("READY=1") is False
    notifier.stopping()  # does not raise


def test_watchdog_interval_is_half_the_timeout() -> None:
    assert Notifier({"WATCHDOG_USEC": "2000000"}).watchdog_interval == 1.0
    mine = str(os.getpid())
    assert Notifier({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": mine}).watchdog_interval == 30
    # Meant for another process (a parent that ran us): not ours to answer.
    assert Notifier({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "1"}).watchdog_interval is None
    assert Notifier({"WATCHDOG_USEC": "soon"}).watchdog_interval is None


# -- a real `vaultd run` -----------------------------------------------------------------------


@dataclass
class Live:
    daemon: RunningDaemon
    listener: Listener
    config: Path
    valid_config: str

    @property
    def pid(self) -> int:
        return self.daemon.process.pid

    def from_daemon(self, since: int = 0) -> list[Message]:
        return self.listener.messages(since, pid=self.pid)


def seed_vault(vault: Path) -> None:
    (vault / "Animals").mkdir(parents=True)
    (vault / "Animals" / "Otter.md").write_text("# Otter\n\nOtters hold hands while asleep.\n")
    (vault / "Garden.md").write_text("# Garden\n\nTomatoes want the south wall.\n")


@contextmanager
def launched(workdir: Path, listener: Listener) -> Iterator[Live]:
    """A daemon on a two-note vault under `workdir`, told to notify `listener`; stopped after."""
    vault = workdir / "vault"
    seed_vault(vault)
    sockets = short_socket_dir()
    config = write_config(workdir / "vaultd.toml", vault, workdir / "data", sockets / "vaultd.sock")
    env = {
        "NOTIFY_SOCKET": listener.address,
        # systemd would ping at half of this: every second.
        "WATCHDOG_USEC": "2000000",
        # In case this test itself runs under a watchdog: the daemon must use its own.
        "WATCHDOG_PID": "",
    }
    try:
        daemon = start(config, sockets / "vaultd.sock", workdir / "vaultd.log", env=env)
        try:
            live = Live(daemon, listener, config, config.read_text(encoding="utf-8"))
            # The socket answers a moment before readiness is sent: the worker and the
            # scheduler start in between, which takes a while on a busy machine.
            listener.wait_for(lambda ms: any(has("READY")(m) for m in ms), "READY=1")
            yield live
        finally:
            if daemon.process.poll() is None:
                daemon.stop()
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """One daemon for the tests that leave it running; each restores what it changes."""
    directory = short_socket_dir()
    listener = Listener(str(directory / "notify"))
    try:
        with launched(tmp_path_factory.mktemp("notify"), listener) as running:
            yield running
    finally:
        listener.close()
        shutil.rmtree(directory, ignore_errors=True)


def healthy(daemon: RunningDaemon) -> bool:
    return daemon.process.poll() is None and daemon.request("GET", "/v1/health")["status"] == "ok"


@pytest.mark.slow
def test_ready_is_sent_once_serving(live: Live) -> None:
    messages = live.from_daemon()
    assert messages, "the daemon sent nothing"
    first = next((m for m in messages if has("READY")(m)), None)
    assert first is not None, [m.raw for m in messages]
    # Nothing but status text may precede readiness.
    before = messages[: messages.index(first)]
    assert all(set(m.fields) == {"STATUS"} for m in before), [m.raw for m in before]
    assert "STATUS" in first.fields  # `systemctl status` shows it
    first_reload = index_of(messages, has("RELOADING"))
    start_up = messages if first_reload < 0 else messages[:first_reload]
    assert sum(1 for m in start_up if has("READY")(m)) == 1
    if PASSCRED is not None:
        # NotifyAccess=main: every notification comes from the main process itself.
        assert {m.pid for m in live.listener.messages()} == {live.pid}


@pytest.mark.slow
def test_watchdog_pings_about_every_second(live: Live) -> None:
    mark = live.listener.mark()

    def pings() -> list[float]:
        return [m.at for m in live.from_daemon(mark) if m.raw == "WATCHDOG=1"]

    wait_until(lambda: len(pings()) >= 4, "four pings")
    gaps = [b - a for a, b in itertools.pairwise(pings())]
    # Half of WATCHDOG_USEC (1 s), give or take the main loop's tick.
    # A loaded CI machine can delay the main loop's tick; systemd's limit here is 2 s.
    assert all(0.7 <= gap <= 2.0 for gap in gaps), gaps


@pytest.mark.slow
def test_sighup_with_a_valid_config_reloads(live: Live) -> None:
    live.config.write_text(live.valid_config.replace('"200ms"', '"300ms"'), encoding="utf-8")
    try:
        mark = live.listener.mark()
        before = time.monotonic_ns() // 1000
        live.daemon.process.send_signal(signal.SIGHUP)
        found = live.listener.wait_for(
            sequence(has("RELOADING"), has("READY")), "RELOADING=1 then READY=1", since=mark
        )
        reloading = found[index_of(found, has("RELOADING"))]
        assert before <= int(reloading.fields["MONOTONIC_USEC"]) <= time.monotonic_ns() // 1000
        assert "configuration reloaded" in live.daemon.log_text()
        assert healthy(live.daemon)
    finally:
        live.config.write_text(live.valid_config, encoding="utf-8")


@pytest.mark.slow
def test_sighup_with_an_invalid_config_keeps_the_running_one(live: Live) -> None:
    broken = live.valid_config.replace('"200ms"', '"soon"') + "\n[bogus]\nkey = 1\n"
    live.config.write_text(broken, encoding="utf-8")
    try:
        mark = live.listener.mark()
        live.daemon.process.send_signal(signal.SIGHUP)
        # The reload still ends, with READY=1, so `systemctl reload` does not hang.
        live.listener.wait_for(
            sequence(has("RELOADING"), has("READY")), "RELOADING=1 then READY=1", since=mark
        )
        wait_until(lambda: "reload failed" in live.daemon.log_text(), "the failure is logged")
        failure = [line for line in live.daemon.log_text().splitlines() if "reload failed" in line]
        assert failure, live.daemon.log_text()
        assert "debounce" in failure[-1] and "bogus" in failure[-1]
        assert healthy(live.daemon)
        assert live.daemon.search("otters", mode="keyword")[0]["path"] == "Animals/Otter.md"
    finally:
        live.config.write_text(live.valid_config, encoding="utf-8")
    # Still alive a moment later, and still pinging the watchdog.
    mark = live.listener.mark()
    live.listener.wait_for(
        lambda ms: any(m.raw == "WATCHDOG=1" for m in ms), "WATCHDOG=1", since=mark
    )
    assert healthy(live.daemon)


@pytest.mark.slow
def test_a_second_daemon_on_the_same_data_dir_exits_75(live: Live, tmp_path: Path) -> None:
    mark = live.listener.mark()
    log = tmp_path / "second.log"
    second = start(live.config, live.daemon.socket, log, env=live.daemon.env, wait_ready=False)
    try:
        code = second.process.wait(60)
    finally:
        if second.process.poll() is None:
            second.process.kill()
    text = log.read_text(encoding="utf-8")
    assert code == 75, text
    assert "another vaultd process" in text and f"pid {live.pid}" in text, text
    # It never claimed to be ready, and the first one is untouched.
    if PASSCRED is not None:
        assert all(m.pid == live.pid for m in live.listener.messages(mark))
    assert healthy(live.daemon)


@pytest.mark.slow
def test_sigterm_sends_stopping_and_exits_0(tmp_path: Path, listener: Listener) -> None:
    with launched(tmp_path, listener) as running:
        mark = listener.mark()
        began = time.monotonic()
        running.daemon.process.send_signal(signal.SIGTERM)
        code = running.daemon.process.wait(PATIENCE)
        took = time.monotonic() - began
    assert code == 0, running.daemon.log_text()
    # With nothing in flight, nothing to wait out: not the bound on the batch in flight.
    assert took < STOP_TIMEOUT, f"stopping took {took:.1f} s"
    assert "did not finish in time" not in running.daemon.log_text()
    stopping = listener.wait_for(
        lambda ms: any(has("STOPPING")(m) for m in ms), "STOPPING=1", since=mark
    )
    assert all(m.pid in (None, running.pid) for m in stopping)
    assert '"stopped"' in running.daemon.log_text()


def test_an_invalid_config_exits_78_listing_every_bad_key(
    tmp_path: Path, listener: Listener
) -> None:
    vault = tmp_path / "vault"
    seed_vault(vault)
    config = tmp_path / "vaultd.toml"
    config.write_text(
        f'[vault]\npath = "{vault}"\nexclud = ["Templates/"]\n\n'
        '[watch]\ndebounce = "soon"\n\n'
        '[log]\nlevel = "loud"\n\n'
        "[bogus]\nkey = 1\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "vaultd", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        env={**os.environ, "NOTIFY_SOCKET": listener.address},
        timeout=60,
        check=False,
    )
    assert done.returncode == 78, done.stderr
    for problem in ("[vault] exclud", "did you mean 'exclude'", "[watch] debounce", "[log] level"):
        assert problem in done.stderr, done.stderr
    assert "unknown section [bogus]" in done.stderr
    assert str(config) in done.stderr
    assert "Traceback" not in done.stderr
    listener.drain()
    assert listener.messages() == []  # never READY


# -- a dead thread stops the pings (RELIABILITY.md case 28) ------------------------------------


@dataclass
class FakeWatcher:
    running: bool = True
    failing: bool = False
    attempts: int = 0
    mode: str = "native"
    fallback_reason: str = ""

    def alive(self) -> bool:
        return self.running

    def stop(self) -> None:
        self.running = False

    def start(self) -> None:
        self.attempts += 1
        if self.failing:
            raise OSError(errno.ENOTCONN, os.strerror(errno.ENOTCONN))
        self.running = True

    def pending(self) -> int:
        return 0


@dataclass
class FakeWorker:
    running: bool = True
    paused: bool = False
    #: The main loop's ticks: each asks for the queue depth for its status line.
    ticks: int = 0

    def is_alive(self) -> bool:
        return self.running

    def request_full(self) -> None:
        pass

    def queue_depth(self) -> int:
        self.ticks += 1
        return 0


def pings(listener: Listener, since: int) -> list[Message]:
    return [m for m in listener.messages(since) if m.raw == "WATCHDOG=1"]


def test_a_dead_part_never_pings_and_a_deliberate_pause_does(
    tmp_path: Path, listener: Listener
) -> None:
    """The service's own main loop, with stand-ins for the watcher and the worker."""
    root = tmp_path / "vault"
    root.mkdir()
    config = write_config(tmp_path / "c.toml", root, tmp_path / "data", short_socket_dir() / "s")
    env = {"NOTIFY_SOCKET": listener.address, "WATCHDOG_USEC": "200000", "WATCHDOG_PID": ""}
    daemon = Daemon(load_config(config, env={}), env=env)
    watcher, worker = FakeWatcher(), FakeWorker()
    # A real manifest: the loop checks that vaultd.db is still the file it opened.
    manifest = Manifest(tmp_path / "data")
    daemon.index = cast(Index, SimpleNamespace(vault=root, manifest=manifest))
    daemon.watcher, daemon.worker = cast(Watcher, watcher), cast(Worker, worker)
    daemon.state.started()
    loop = threading.Thread(target=daemon._main_loop, name="main-loop", daemon=True)
    loop.start()
    try:
        listener.wait_for(lambda ms: len(pings(listener, 0)) >= 3, "pings while all is well")

        # The watcher dies and its first restart fails: no ping until one succeeds.
        watcher.running, watcher.failing = False, True
        wait_until(lambda: watcher.attempts == 1, "the first restart, which fails")
        listener.drain()  # the pings of the ticks before it are in
        mark, ticks = listener.mark(), worker.ticks
        wait_until(lambda: worker.ticks >= ticks + 5, "five ticks more")
        listener.drain()
        assert pings(listener, mark) == []
        watcher.failing = False  # the next try (2 s after the first, or later) succeeds
        listener.wait_for(lambda ms: bool(pings(listener, mark)), "pings again", since=mark)
        assert watcher.attempts >= 2 and watcher.running

        # The vault root is gone: the watcher is stopped on purpose; the service lives.
        root.rmdir()
        mark = listener.mark()
        listener.wait_for(lambda ms: len(pings(listener, mark)) >= 3, "pings while paused")
        assert worker.paused and not watcher.running
        root.mkdir()
        listener.wait_for(lambda ms: not worker.paused, "re-armed")

        # The worker ends: nothing restarts it, so the pings stop for good and status says why.
        worker.running = False
        wait_until(lambda: "worker" in daemon.state.snapshot()["reasons"], "the loop notices")
        listener.drain()
        mark, ticks = listener.mark(), worker.ticks
        wait_until(lambda: worker.ticks >= ticks + 6, "six ticks more")
        listener.drain()
        assert pings(listener, mark) == []
        assert daemon.state.snapshot()["status"] == "degraded"
        assert "indexing worker stopped" in daemon.state.snapshot()["reasons"]["worker"]
        statuses = [m.fields.get("STATUS", "") for m in listener.messages()]
        assert any("indexing worker stopped" in s for s in statuses), statuses
    finally:
        daemon.request_stop()
        loop.join(5)
        manifest.close()
    assert not loop.is_alive()


#: Loaded into the daemon through PYTHONPATH: ends one of its threads from the inside, the way
#: an exception nobody catches would. SystemExit, because it gets past `except Exception` and
#: a thread ends on it without a word.
THREAD_KILLERS = """
import os
import threading

_worker = os.environ.get("VDTEST_KILL_WORKER")
_observer = os.environ.get("VDTEST_KILL_OBSERVER")
if _worker or _observer:
    from vaultd.pipeline import watch

if _worker:
    _take = watch.Watcher.take

    def take(self, *, force=False):
        if threading.current_thread().name == "vaultd-worker" and os.path.exists(_worker):
            raise SystemExit("test fault: the indexing worker ends here")
        return _take(self, force=force)

    watch.Watcher.take = take

if _observer:
    _on_any_event = watch.Watcher.on_any_event
    _fired = []

    def on_any_event(self, event):
        if not _fired and os.path.basename(os.fsdecode(event.src_path)) == _observer:
            _fired.append(event)
            raise SystemExit("test fault: the observer thread ends here")
        return _on_any_event(self, event)

    watch.Watcher.on_any_event = on_any_event
"""


@contextmanager
def launched_with_killers(workdir: Path, listener: Listener, **faults: str) -> Iterator[Live]:
    """`launched`, with THREAD_KILLERS armed by `faults` (VDTEST_KILL_*)."""
    vault = workdir / "vault"
    seed_vault(vault)
    site = workdir / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(THREAD_KILLERS)
    sockets = short_socket_dir()
    config = write_config(workdir / "vaultd.toml", vault, workdir / "data", sockets / "vaultd.sock")
    env = {
        "NOTIFY_SOCKET": listener.address,
        "WATCHDOG_USEC": "2000000",
        "WATCHDOG_PID": "",
        "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p),
        **faults,
    }
    try:
        daemon = start(config, sockets / "vaultd.sock", workdir / "vaultd.log", env=env)
        try:
            live = Live(daemon, listener, config, config.read_text(encoding="utf-8"))
            # The socket answers a moment before readiness is sent: the worker and the
            # scheduler start in between, which takes a while on a busy machine.
            listener.wait_for(lambda ms: any(has("READY")(m) for m in ms), "READY=1")
            yield live
        finally:
            if daemon.process.poll() is None:
                daemon.stop()
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


def logged(daemon: RunningDaemon, event: str) -> list[dict[str, Any]]:
    lines = daemon.log_text().splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{")]
    return [r for r in records if r.get("event") == event]


@pytest.mark.slow
def test_a_dead_indexing_worker_stops_the_pings_and_the_restart_converges(
    tmp_path: Path, listener: Listener
) -> None:
    kill = tmp_path / "kill-worker"
    with launched_with_killers(tmp_path, listener, VDTEST_KILL_WORKER=str(kill)) as live:
        daemon = live.daemon
        listener.wait_for(lambda ms: bool(pings(listener, 0)), "WATCHDOG=1")
        kill.touch()

        def degraded() -> bool:
            health = daemon.request("GET", "/v1/health")
            return health["status"] == "degraded" and "worker" in health.get("reason", "")

        wait_until(degraded, "the dead worker is noticed")
        listener.drain()  # the pings sent before it are in
        mark = listener.mark()
        # Written now, it waits for the next process: this one indexes nothing any more.
        (live.config.parent / "vault" / "Late.md").write_text("# Late\n\nA heron at dusk.\n")
        time.sleep(3.0)  # three ping intervals
        # A reload is done by the main loop, between its checks: once it is over, the loop has
        # run past the window above.
        daemon.process.send_signal(signal.SIGHUP)
        live.listener.wait_for(
            sequence(has("RELOADING"), has("READY")), "RELOADING=1 then READY=1", since=mark
        )
        assert pings(listener, mark) == [], "a dead worker must not be covered by pings"
        statuses = [m.fields.get("STATUS", "") for m in live.from_daemon()]
        assert any("indexing worker stopped" in s for s in statuses), statuses
        stopped = "the indexing worker stopped; nothing is indexed until vaultd restarts"
        assert len(logged(daemon, stopped)) == 1
        assert daemon.process.poll() is None  # alive, but no longer vouched for

        # What systemd does when the pings stop: kill it (in the end with SIGKILL) and start
        # it again. The next process indexes what this one could not.
        daemon.stop(signal.SIGKILL)
        kill.unlink()
        again = start(live.config, daemon.socket, tmp_path / "again.log", env=daemon.env)
        try:
            hits = again.search("heron", mode="keyword")
            assert [h["path"] for h in hits] == ["Late.md"]
            assert_converged(again, tmp_path / "vault", tmp_path)
        finally:
            if again.process.poll() is None:
                again.stop()


@pytest.mark.slow
def test_a_dead_observer_thread_is_restarted_and_the_pings_go_on(
    tmp_path: Path, listener: Listener
) -> None:
    with launched_with_killers(tmp_path, listener, VDTEST_KILL_OBSERVER="Tripwire.md") as live:
        daemon = live.daemon
        listener.wait_for(lambda ms: bool(pings(listener, 0)), "WATCHDOG=1")
        wall_minus_monotonic = time.time() - time.monotonic()
        vault = live.config.parent / "vault"
        # Its first event ends the observer thread: this note's own events are lost with it.
        (vault / "Tripwire.md").write_text("# Tripwire\n\nA kingfisher on the wire.\n")

        wait_until(
            lambda: bool(logged(daemon, "the file watcher is running again")),
            "the file watcher is restarted",
        )
        [died] = logged(daemon, "the file watcher stopped; restarting it and reconciling")
        [back] = logged(daemon, "the file watcher is running again")
        mark = listener.mark()
        listener.wait_for(lambda ms: bool(pings(listener, mark)), "pings after the restart")
        # Only the full reconcile that follows a restart can find it.
        hits = daemon.search("kingfisher", mode="keyword", wait_for="Tripwire.md")
        assert [h["path"] for h in hits] == ["Tripwire.md"]
        assert daemon.request("GET", "/v1/health")["status"] == "ok"

        # No ping while the watcher was down, between noticing and restarting it.
        down = (
            datetime.fromisoformat(died["timestamp"]).timestamp() + 0.15,
            datetime.fromisoformat(back["timestamp"]).timestamp() - 0.15,
        )
        during = [m for m in pings(listener, 0) if down[0] < m.at + wall_minus_monotonic < down[1]]
        assert during == [], (down, [m.at + wall_minus_monotonic for m in pings(listener, 0)])

        # Watching works again.
        (vault / "Pond.md").write_text("# Pond\n\nNewts under the lily pads.\n")
        hits = daemon.search("newts", mode="keyword", wait_for="Pond.md")
        assert [h["path"] for h in hits] == ["Pond.md"]
        assert_converged(daemon, vault, tmp_path)
