"""Progress where the user looks: `vaultd run` on a terminal draws a first index's bars (phase,
counts, time left), logs `indexing` lines elsewhere, and status says `indexing` from the first
answer on, where it said `starting` for the whole first index though searches were answered."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import shutil
import signal
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path
from typing import Any

from harness.daemon import PATIENCE, running, short_socket_dir, wait_until
from tests.conftest import shared_path
from vaultd.api.client import Client

#: A bar's reading as tqdm draws it: `embedding:  35%|███▌      | 10.2k/29.1k [00:05<00:09, ...`.
READING = re.compile(r"(hash|keyword index|embedding):\s+(\d+)%\|[^|]*\|\s*([^\s\[]+)")


def help_folders(vault: Path) -> Path:
    """Two folders of the help vault: a first index of a few hundred chunks, long enough to
    be seen under way on two shared cores, short enough for the suite."""
    for name in ("Bases", "Plugins"):
        shutil.copytree(shared_path("corpora", "obsidian-help", "en", name), vault / name)
    return vault


class Terminal:
    """`vaultd run` on a real pseudo-terminal, what it draws read as it comes."""

    def __init__(self, args: list[str]) -> None:
        parent, child = pty.openpty()
        fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
        self.process = subprocess.Popen(
            args, stdin=child, stdout=child, stderr=child, close_fds=True
        )
        os.close(child)
        self._parent = parent
        self._out = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._parent, 65536)
            except OSError:  # EIO: the child side is closed
                return
            if not data:
                return
            with self._lock:
                self._out += data

    def text(self) -> str:
        with self._lock:
            return self._out.decode(errors="replace")

    def close(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(PATIENCE)
        self._reader.join(PATIENCE)
        os.close(self._parent)
        return code


def plain(output: str) -> str:
    """What a terminal shows of `output`, colours and cursor moves dropped."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output)


def readings(output: str) -> list[tuple[str, int, str]]:
    """Every bar reading drawn (phase, percent, count), in order."""
    return [(m[1], int(m[2]), m[3]) for m in READING.finditer(plain(output))]


def test_run_on_a_terminal_shows_a_moving_bar_and_status_says_indexing(tmp_path: Path) -> None:
    vault = help_folders(tmp_path / "vault")
    socket = short_socket_dir() / "vaultd.sock"
    config = tmp_path / "vaultd.toml"
    # The log's format is left to `auto`: text on a terminal, as a person runs it. Never
    # yields (this is about the display, not about a shared machine), and runs a third of the
    # time: a pass long enough for `vaultd status` to be asked during it on a fast machine.
    config.write_text(
        f'[vault]\npath = "{vault}"\n[store]\npath = "{tmp_path / "data"}"\n'
        f'[server]\nsocket = "{socket}"\n[embedding]\nyield_above = 1.0\ncpu_budget = 0.3\n'
    )
    terminal = Terminal([sys.executable, "-m", "vaultd", "run", "--config", str(config)])
    seen: dict[str, Any] = {}
    try:
        client = Client(socket, timeout=90)
        wait_until(client.reachable, "the daemon answers")
        # From its first answers on, status says what it does: indexing, and the phase.
        status = client.request("GET", "/v1/status")
        assert status["state"] in ("starting", "indexing"), status
        wait_until(
            lambda: client.request("GET", "/v1/status")["state"] == "indexing",
            "status says indexing",
        )

        def indexing_shown() -> bool:
            shown = subprocess.run(
                [sys.executable, "-m", "vaultd", "status", "--config", str(config)],
                capture_output=True,
                text=True,
                timeout=PATIENCE,
            )
            status = client.request("GET", "/v1/status")
            if status["status"] == "ok":
                raise AssertionError(f"the first index ended before status was read: {seen}")
            seen["status"], seen["text"] = status, shown.stdout
            return "state:    indexing (" in shown.stdout

        wait_until(indexing_shown, "vaultd status says indexing, with the phase")
        # The health is still "starting" (READY, wait_for and clients go by it).
        assert seen["status"]["status"] == "starting", seen["status"]
        assert seen["status"]["state"] == "indexing", seen["status"]
        wait_until(
            lambda: client.request("GET", "/v1/health")["status"] == "ok",
            "the first index ends",
            timeout=600,
        )
        assert client.request("GET", "/v1/status")["state"] == "idle"
        wait_until(lambda: "] reconciled" in plain(terminal.text()), "the pass's line is logged")
    finally:
        code = terminal.close()
    output = terminal.text()
    assert code == 0, output
    drawn = readings(output)
    embedding = [(percent, count) for phase, percent, count in drawn if phase == "embedding"]
    # The bar moves: two different readings, one of them on the way.
    assert len(set(embedding)) >= 2, drawn
    assert any(0 < percent < 100 for percent, _ in embedding), drawn
    assert ("embedding", 100) in {(phase, percent) for phase, percent, _ in drawn}, drawn
    # The pass's line reads its durations in seconds or minutes past a second.
    reconciled = [line for line in plain(output).splitlines() if "] reconciled" in line]
    assert reconciled and " took=" in reconciled[0], reconciled
    assert not re.search(r"\b(ms|keyword_ms)=\d", reconciled[0]), reconciled


def test_run_off_a_terminal_logs_the_pass_as_it_goes(tmp_path: Path) -> None:
    """No bar where nobody watches one (a journal, a file): `indexing` lines with the phase,
    the counts and the time left, as structured as every other line."""
    vault = tmp_path / "vault"
    vault.mkdir()
    for n in range(40):
        (vault / f"Note {n}.md").write_text(f"# Note {n}\n\n" + f"Words about otters {n}. " * 60)
    with running(vault, tmp_path) as daemon:
        status = daemon.request("GET", "/v1/status")
        assert status["state"] == "idle", status
    lines = [json.loads(line) for line in daemon.log_text().splitlines() if line.startswith("{")]
    progress = [line for line in lines if line.get("event") == "indexing"]
    phases = {line["phase"] for line in progress}
    assert {"keyword index", "embedding"} <= phases, progress
    for line in progress:
        assert {"percent", "done", "total", "unit", "left_ms"} <= set(line), line
    assert any(line["percent"] == 100 for line in progress if line["phase"] == "embedding")
    assert "%|" not in daemon.log_text()
    # JSON keeps the durations in whole milliseconds, for tools.
    reconciled = [line for line in lines if line.get("event") == "reconciled"]
    assert reconciled and isinstance(reconciled[0]["ms"], int), reconciled


def test_systemctl_status_shows_the_phase_of_a_first_index(tmp_path: Path) -> None:
    """The line `systemctl status` shows (`STATUS=`) names the phase and its share while a
    full pass runs, where it said `starting; full reconcile` for the whole first index."""
    from tests.test_notify import Listener

    vault = help_folders(tmp_path / "vault")
    directory = short_socket_dir()
    listener = Listener(str(directory / "notify"))
    try:
        env = {"NOTIFY_SOCKET": listener.address}
        with running(vault, tmp_path, env=env, wait_ready=False) as daemon:
            wait_until(
                lambda: daemon.request("GET", "/v1/health")["status"] == "ok",
                "the first index ends",
                timeout=600,
            )
            pid = daemon.process.pid
            shown = [m.fields.get("STATUS", "") for m in listener.messages(pid=pid)]
    finally:
        listener.close()
    phases = [line for line in shown if "indexing (" in line]
    assert any("embedding" in line for line in phases), shown
    assert len(set(phases)) >= 2, shown
