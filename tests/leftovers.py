"""Processes a test started that outlive it, found in /proc (Linux; nothing elsewhere).

A process is this test process's when it descends from it, or when its environment carries
the mark `tests/conftest.py` sets at import: a daemon killed with SIGKILL leaves its own
children to init, and only the inherited mark still ties them to the run that started them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

#: The variable that marks every process a test process starts (through its environment).
MARK = "VAULTD_TEST_PROCESS_OWNER"
_PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class Proc:
    pid: int
    ppid: int
    state: str
    command: str


def mark_this_process() -> str:
    """Give this process (and so everything it starts from now on) a mark of its own."""
    value = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    os.environ[MARK] = value
    return value


def processes() -> list[Proc]:
    """Every process readable in /proc (none where there is no /proc)."""
    out = []
    for entry in _PROC.glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        # The command name is in parentheses and may hold spaces or parentheses itself.
        fields = stat[stat.rindex(")") + 2 :].split()
        command = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
        out.append(Proc(int(entry.name), int(fields[1]), fields[0], command))
    return out


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, which nobody reaped yet, has ended)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"


def descendants(pid: int, table: list[Proc] | None = None) -> list[Proc]:
    table = processes() if table is None else table
    below: dict[int, list[Proc]] = {}
    for proc in table:
        below.setdefault(proc.ppid, []).append(proc)
    out, todo = [], [pid]
    while todo:
        for child in below.get(todo.pop(), []):
            out.append(child)
            todo.append(child.pid)
    return out


def marked(value: str, table: list[Proc] | None = None) -> list[Proc]:
    """The processes whose environment carries the mark `value`."""
    needle = f"{MARK}={value}".encode()
    out = []
    for proc in processes() if table is None else table:
        try:
            environ = (_PROC / str(proc.pid) / "environ").read_bytes()
        except OSError:
            continue  # gone, or not ours to read
        if needle in environ.split(b"\0"):
            out.append(proc)
    return out


def started_by_this_process(value: str, keep: set[int]) -> list[Proc]:
    """This process's running descendants and marked processes, except the pids in `keep`."""
    table = processes()
    found = {p.pid: p for p in descendants(os.getpid(), table) + marked(value, table)}
    return [
        p for pid, p in sorted(found.items()) if pid not in keep | {os.getpid()} and p.state != "Z"
    ]


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait until none of `pids` runs, at most `timeout` seconds; those still running."""
    deadline = time.monotonic() + timeout
    while True:
        left = [pid for pid in pids if alive(pid)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
