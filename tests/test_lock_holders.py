"""What holds the data directory's lock decides who waits for whom, with real processes.

A daemon started while a reader holds the lock (a query answered without a daemon) waits for it,
then serves; one started while another daemon, an index run or a holder of the older lock file
holds it exits 75 at once; a query started while the daemon is still starting waits for its
socket. Real `vaultd run` and `vaultd search` processes, the real lock and socket. The reader is
a process that opens the index as a query does and holds it until the test lets it go.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.daemon import (
    PATIENCE,
    RunningDaemon,
    fault_env,
    short_socket_dir,
    start,
    wait_until,
    write_config,
)
from harness.vaults import write_vault
from vaultd.daemon.lifecycle import READER_PATIENCE
from vaultd.errors import LockedError, ReaderHeldError
from vaultd.storage.lock import Holder, LockHolder, read_holder

VAULTD = [sys.executable, "-m", "vaultd"]
#: How long a wait on a process started from cold may take before it counts as a failure: the
#: tests must pass on a machine whose cores other programs keep busy, where a `vaultd` process
#: at a low priority takes a minute to start. It only bounds a failure.
LIMIT = 2.5 * PATIENCE

#: Opens the index as a query answered without a daemon does, as `argv[2]`, and holds it until
#: its stdin closes; with `older`, rewrites the lock file as a vaultd before holders said what
#: they are wrote it (a bare pid).
HOLD = """
import os, sys
from pathlib import Path
from vaultd.config import load_config
from vaultd.index.open import open_index
from vaultd.storage.lock import Holder

config = load_config(Path(sys.argv[1]), env={})
with open_index(config, create=False, holder=Holder(sys.argv[2])):
    if sys.argv[3:] == ["older"]:
        (config.require_store() / "vaultd.lock").write_text(f"{os.getpid()}\\n")
    print("held", flush=True)
    sys.stdin.read()
"""

#: A fault for the daemon: its socket server starts only once the gate file exists, so the test
#: can act while the daemon holds the lock and does not answer yet.
GATE = """
import os, time
import vaultd.api.server as server

_start_server = server.start_server

def start_server(*args, **kwargs):
    while not os.path.exists(os.environ["VAULTD_TEST_GATE"]):
        time.sleep(0.05)
    return _start_server(*args, **kwargs)

server.start_server = start_server
"""


@pytest.fixture
def indexed(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The config, socket and data directory of a vault indexed by `vaultd index`, no daemon."""
    vault = write_vault(tmp_path / "vault")
    sock = short_socket_dir() / "vaultd.sock"
    config = write_config(tmp_path / "vaultd.toml", vault, tmp_path / "data", sock)
    subprocess.run(
        [*VAULTD, "index", "--quiet", "--config", str(config)], check=True, timeout=LIMIT
    )
    return config, sock, tmp_path / "data"


def hold(config: Path, kind: Holder, *extra: str) -> subprocess.Popen[str]:
    """A process holding the lock as `kind` (until `let_go`)."""
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(config), kind.value, *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    if line != "held\n":
        let_go(child)
        raise AssertionError(f"the holder did not take the lock: {line!r}")
    return child


def let_go(child: subprocess.Popen[str]) -> None:
    """The holder's stdin closes; it releases the lock and exits."""
    assert child.stdin is not None and child.stdout is not None
    if not child.stdin.closed:
        child.stdin.close()
    child.wait(LIMIT)
    child.stdout.close()


def wait_for(condition: Callable[[], bool], what: str) -> None:
    wait_until(condition, what, LIMIT)


def run_daemon(
    config: Path, log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    with log.open("ab") as handle:
        return subprocess.Popen(
            [*VAULTD, "run", "--config", str(config)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )


def events(log: Path, name: str) -> list[dict[str, object]]:
    found = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("event") == name:
                found.append(record)
    return found


class Notifications:
    """What the daemon tells the service manager: a datagram socket at $NOTIFY_SOCKET."""

    def __init__(self) -> None:
        self.path = short_socket_dir() / "notify"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(self.path))
        self.sock.setblocking(False)
        self.lines: list[str] = []

    def received(self) -> list[str]:
        while True:
            try:
                self.lines += self.sock.recv(65536).decode().splitlines()
            except BlockingIOError:
                return self.lines

    def close(self) -> None:
        self.sock.close()


WAITING = "waiting for a reader to let go of the data directory"


@contextmanager
def stopped_after(process: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_daemon_started_while_a_reader_holds_the_lock_waits_then_serves(
    indexed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    config, sock, data = indexed
    log = tmp_path / "vaultd.log"
    manager = Notifications()
    reader = hold(config, Holder.QUERY)
    try:
        started = run_daemon(config, log, {"NOTIFY_SOCKET": str(manager.path)})
        with stopped_after(started) as process:
            daemon = RunningDaemon(process, config, sock, log)
            wait_for(lambda: bool(events(log, WAITING)) or process.poll() is not None, WAITING)
            assert process.poll() is None, daemon.log_text()
            [said] = events(log, WAITING)
            assert (said["pid"], said["holder"]) == (reader.pid, "query")
            assert not daemon.client.reachable()
            # Told to the service manager, with its start timeout pushed past the wait.
            wait_for(
                lambda: any(m.startswith("EXTEND_TIMEOUT_USEC=") for m in manager.received()),
                "EXTEND_TIMEOUT_USEC",
            )
            extend = next(m for m in manager.lines if m.startswith("EXTEND_TIMEOUT_USEC="))
            assert int(extend.split("=")[1]) > READER_PATIENCE * 1e6
            what = f"a query answered from the index, pid {reader.pid}"
            assert any(m.startswith("STATUS=waiting") and what in m for m in manager.lines)
            assert "READY=1" not in manager.lines
            let_go(reader)
            # Once the reader is done the daemon comes up, with no one starting it again.
            wait_for(lambda: "READY=1" in manager.received() or process.poll() is not None, "READY")
            assert process.poll() is None, daemon.log_text()
            assert daemon.request("GET", "/v1/health")["status"] in ("starting", "ok")
            assert read_holder(data) == LockHolder(process.pid, Holder.DAEMON)
            assert len(events(log, WAITING)) == 1  # said once
            assert daemon.stop() == 0
    finally:
        let_go(reader)
        manager.close()


def run_once(config: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`vaultd run` that is expected to end by itself: its exit and what it said."""
    return subprocess.run(
        [*VAULTD, "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=LIMIT,
        check=False,
        env={**os.environ, **(env or {})},
    )


#: A fault for the daemon: a start waits one second for a reader, not a minute, so the test can
#: see what happens when the wait runs out.
IMPATIENT = """
import vaultd.daemon.lifecycle as lifecycle

lifecycle.READER_PATIENCE = 1.0
"""


def test_a_reader_that_holds_on_past_the_wait_ends_the_start_with_an_exit_that_is_retried(
    indexed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    config, _, _ = indexed
    reader = hold(config, Holder.QUERY)
    try:
        done = run_once(config, fault_env(tmp_path, IMPATIENT))
        # Not 75, which the unit files list in RestartPreventExitStatus: the reader will let go.
        assert done.returncode == ReaderHeldError.exit_code != LockedError.exit_code, done.stderr
        assert WAITING in done.stderr
        said = f"a query answered from the index, pid {reader.pid}) has held"
        assert said in done.stderr, done.stderr
    finally:
        let_go(reader)


def refused_at_once(config: Path) -> str:
    """`vaultd run` exits 75 on its first try for the lock: a daemon that waits says so first,
    and here nothing comes before the refusal (however slowly a loaded machine runs it).
    Returns what it said."""
    done = run_once(config)
    assert done.returncode == LockedError.exit_code, done.stderr
    assert done.stderr.startswith("vaultd: another vaultd process ("), done.stderr
    assert WAITING not in done.stderr
    return done.stderr


def test_a_daemon_started_while_another_daemon_holds_the_lock_exits_75_at_once(
    indexed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    config, sock, _ = indexed
    first = start(config, sock, tmp_path / "first.log", ready_timeout=LIMIT)
    try:
        said = refused_at_once(config)
        assert f"another vaultd process (the daemon, pid {first.process.pid}) is using" in said
        assert first.request("GET", "/v1/health")["status"] == "ok"
    finally:
        assert first.stop() == 0


@pytest.mark.parametrize(
    ("extra", "who"),
    [
        ((), "another vaultd process (`vaultd index` or `reindex`, pid {pid}) is using"),
        # A lock file of the older form, a bare pid: of no known kind, refused as before.
        (("older",), "another vaultd process (pid {pid}) is using"),
    ],
    ids=["index run", "older lock file"],
)
def test_a_daemon_started_while_an_index_run_holds_the_lock_exits_75_at_once(
    indexed: tuple[Path, Path, Path], tmp_path: Path, extra: tuple[str, ...], who: str
) -> None:
    config, _, data = indexed
    holder = hold(config, Holder.INDEX, *extra)
    try:
        kind = None if extra else Holder.INDEX
        assert read_holder(data) == LockHolder(holder.pid, kind)
        said = refused_at_once(config)
        assert who.format(pid=holder.pid) in said, said
    finally:
        let_go(holder)


def test_a_query_started_while_the_daemon_is_starting_waits_for_its_socket(
    indexed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    config, sock, data = indexed
    gate = tmp_path / "gate"
    env = fault_env(tmp_path, GATE, VAULTD_TEST_GATE=str(gate))
    with stopped_after(run_daemon(config, tmp_path / "vaultd.log", env)) as process:
        daemon = RunningDaemon(process, config, sock, tmp_path / "vaultd.log")
        wait_for(
            lambda: (
                read_holder(data) == LockHolder(process.pid, Holder.DAEMON)
                or process.poll() is not None
            ),
            "the daemon holds the lock",
        )
        out, err = tmp_path / "search.out", tmp_path / "search.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            search = subprocess.Popen(
                [*VAULTD, "search", "compost", "--json", "--config", str(config)],
                stdout=stdout,
                stderr=stderr,
            )
        try:
            waiting = f"the daemon, pid {process.pid}) is starting; waiting for it to answer"
            wait_for(lambda: waiting in err.read_text() or search.poll() is not None, "it waits")
            assert search.poll() is None, err.read_text()
            assert not daemon.client.reachable()
            gate.touch()
            assert search.wait(LIMIT) == 0, err.read_text()
        finally:
            if search.poll() is None:
                search.kill()
                search.wait()
        # Answered by the daemon: it held the index all along.
        hits = json.loads(out.read_text())["hits"]
        assert hits and hits[0]["path"] == "Garden/Compost.md"
        assert read_holder(data) == LockHolder(process.pid, Holder.DAEMON)
        assert daemon.stop() == 0
