"""Load that once locked every other request out of the daemon, for a test and a benchmark.

Long-polls (searches waiting for a note the daemon holds back), slow senders (a request trickled a
byte at a time, sent again each time the daemon cuts it) and a health probe asking on a fresh
connection all along. Unix sockets only; every thread stops by `stop` or its own deadline.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Answer:
    status: int
    code: str
    seconds: float


@dataclass
class Load:
    sock: Path
    #: Long-polls started, and the answers they got (status 0: no answer).
    long_polls: list[Answer] = field(default_factory=list)
    #: Requests the slow senders started, and how many of them the daemon cut.
    slow_started: int = 0
    slow_cut: int = 0
    health: list[Answer] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start_long_polls(self, count: int, target: str, wait: float) -> None:
        """`count` searches waiting up to `wait` s for `target` (a note or "idle")."""
        for _ in range(count):
            self._spawn(self._long_poll, target, wait)

    def start_slow_senders(self, count: int, interval: float, until: float) -> None:
        for number in range(count):
            self._spawn(self._slow_sender, number, interval, until)

    def probe_health(self, every: float, until: float) -> None:
        """Ask for health (and every fourth time status) until `until`, in this thread."""
        turn = 0
        while time.monotonic() < until and not self.stop.is_set():
            target = "/v1/status" if turn % 4 == 3 else "/v1/health"
            self.health.append(ask(self.sock, "GET", target, timeout=30))
            turn += 1
            self.stop.wait(every)

    def close(self, patience: float) -> None:
        self.stop.set()
        deadline = time.monotonic() + patience
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        alive = [t for t in self._threads if t.is_alive()]
        assert not alive, f"{len(alive)} load threads still running"

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _long_poll(self, target: str, wait: float) -> None:
        body = {"query": "pending", "k": 1, "wait_for": target, "timeout": wait}
        answer = ask(self.sock, "POST", "/v1/search", body, timeout=wait + 60)
        with self._lock:
            self.long_polls.append(answer)

    def _slow_sender(self, number: int, interval: float, until: float) -> None:
        # Half trickle the request line, half a body after a whole head: both are requests
        # arriving too slowly, which the daemon must cut without making others wait.
        head = (
            b"GET /v1/health?slow="
            if number % 2
            else b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Length: 400\r\n\r\n"
        )
        while time.monotonic() < until and not self.stop.is_set():
            with self._lock:
                self.slow_started += 1
            if self._trickle(head, interval, until):
                with self._lock:
                    self.slow_cut += 1

    def _trickle(self, head: bytes, interval: float, until: float) -> bool:
        """Send `head`, then a byte every `interval` s; True when the daemon cut it off."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(30)
            try:
                conn.connect(str(self.sock))
                conn.sendall(head)
                while time.monotonic() < until and not self.stop.is_set():
                    conn.settimeout(interval)
                    try:
                        if not conn.recv(65536):
                            return True  # closed (possibly after a 503): cut
                    except TimeoutError:
                        pass
                    conn.sendall(b"a")
            except OSError:
                return True
        return False


def ask(sock: Path, method: str, target: str, body: Any = None, *, timeout: float) -> Answer:
    """One request on a fresh connection: its status and error code, and how long it took."""
    started = time.monotonic()
    data = b"" if body is None else json.dumps(body).encode()
    request = (
        f"{method} {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    ).encode() + data
    received = b""
    failure = "closed"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        try:
            conn.connect(str(sock))
            conn.sendall(request)
            while chunk := conn.recv(65536):
                received += chunk
        except OSError as exc:
            failure = repr(exc)
    seconds = time.monotonic() - started
    head, _, payload = received.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 "):
        return Answer(0, f"no answer: {failure}", seconds)
    status = int(head.split()[1])
    code = ""
    with contextlib.suppress(ValueError, AttributeError):
        code = json.loads(payload).get("error", {}).get("code", "")
    return Answer(status, code, seconds)
