"""`vaultd run` started as a shell starts it, and interrupted as a terminal's Ctrl-C does: SIGINT
to the whole foreground process group, every process in it at once.

The daemon is started in a session of its own, so the group it leads is the one signalled and
the caller is not in it. Its output goes to a pipe that a thread drains into the log file, as a
terminal keeps reading. Every process it starts (parser workers, file readers, in sessions of
their own) carries a mark in its environment, which is how one that outlives it is found.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from vaultd.api.client import Client
from vaultd.errors import VaultdError

#: The environment variable that marks a trial's processes.
MARK = "VAULTD_INTERRUPT_TRIAL"
#: How long the processes a stopped daemon started may take to be gone after it exits.
GONE_WITHIN = 2.0


@dataclass
class Started:
    process: subprocess.Popen[bytes]
    socket: Path
    mark: str
    _pump: threading.Thread

    def phase(self) -> str:
        """What the daemon is doing, as its status says: the first pass's phase, "idle", or
        "start-up" while its socket does not answer."""
        try:
            status = Client(self.socket, timeout=2).request("GET", "/v1/status")
        except (OSError, VaultdError):
            return "start-up"
        progress = status.get("progress")
        if progress:
            return str(progress.get("phase") or "pass")
        return str(status.get("indexing") or "idle")

    def readers(self) -> list[tuple[int, str]]:
        """The file readers (OCR, PDF) this daemon's processes run now: pid and command."""
        return [(pid, cmd) for pid, cmd in marked(self.mark) if "vaultd.pipeline." in cmd]


@dataclass(frozen=True)
class Interrupted:
    #: The exit code, None when it had not exited within the limit.
    code: int | None
    #: From the signal to the exit (the limit and more when it had not).
    seconds: float
    #: What the daemon was doing when the signal was sent.
    phase: str
    #: Commands of its processes still running GONE_WITHIN seconds after it exited.
    left: tuple[str, ...]


def start(config: Path, socket: Path, log: Path, env: dict[str, str] | None = None) -> Started:
    """`vaultd run --config CONFIG` leading a process group of its own."""
    mark = uuid.uuid4().hex
    process = subprocess.Popen(
        [sys.executable, "-m", "vaultd", "run", "--config", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {}), MARK: mark},
        start_new_session=True,
    )

    def pump() -> None:
        assert process.stdout is not None
        with process.stdout, log.open("ab") as out:
            for line in process.stdout:
                out.write(line)
                out.flush()

    thread = threading.Thread(target=pump, name="log-pump", daemon=True)
    thread.start()
    return Started(process, socket, mark, thread)


def interrupt(started: Started, limit: float = 5.0, patience: float = 120.0) -> Interrupted:
    """Ctrl-C to the daemon's process group; how and how fast it ended. One that has not exited
    within `limit` is given `patience` more seconds, then killed with its group."""
    phase = started.phase()
    process = started.process
    os.killpg(process.pid, signal.SIGINT)
    sent = time.monotonic()
    try:
        code: int | None = process.wait(limit)
    except subprocess.TimeoutExpired:
        code = None
        try:
            process.wait(patience)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    seconds = time.monotonic() - sent
    started._pump.join(10)
    left = wait_gone(started.mark, GONE_WITHIN)
    for pid, _ in marked(started.mark):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return Interrupted(code, seconds, phase, tuple(cmd for _, cmd in left))


def wait_gone(mark: str, timeout: float) -> list[tuple[int, str]]:
    """The processes carrying `mark` still running after up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while (left := marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def marked(mark: str) -> list[tuple[int, str]]:
    """Running processes (not zombies) whose environment carries `mark`: pid and command."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if stat[stat.rindex(")") + 2 :].split()[0] != "Z":
            found.append((int(entry.name), command.strip()))
    return found
