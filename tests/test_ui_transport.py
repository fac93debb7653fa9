"""The page's server holds the same line as the API's socket (vaultd.api.protocol): slow
senders, a client that never reads and a megabyte request line are each cut or refused within
their deadline, idle connections hold no thread, and the daemon's health is answered through
the page all along. A real daemon, a real page server on loopback TCP, real sockets."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.daemon import PATIENCE, RunningDaemon, running, wait_until
from harness.vaults import write_vault
from tests.page_server import ui_server
from tests.test_server_security import read_all
from vaultd.ui.server import CSP, LIMITS, UiServer

#: Seconds allowed past a deadline on a busy machine.
MARGIN = 5.0
#: Linux's TCP state of a connection reset by its peer.
TCP_CLOSE = 7


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    tmp = tmp_path_factory.mktemp("ui-transport")
    with running(write_vault(tmp / "vault"), tmp) as d:
        d.wait_idle()
        yield d


@pytest.fixture
def ui(daemon: RunningDaemon) -> Iterator[UiServer]:
    vault = Path(daemon.request("GET", "/v1/health")["vault"])
    with ui_server(daemon.client, vault) as server:
        yield server


def login(ui: UiServer) -> str:
    """The cookie, from the link's exchange."""
    target = ui.url.split(str(ui.port), 1)[1]
    answer = exchange(ui, f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{ui.port}\r\n\r\n")
    cookie = next(
        line.split(":", 1)[1].strip()
        for line in answer.decode("latin-1").split("\r\n")
        if line.lower().startswith("set-cookie:")
    )
    return cookie.split(";", 1)[0]


def exchange(ui: UiServer, request: str) -> bytes:
    """One request on a connection of its own; the answer's head (and what came with it)."""
    with socket.create_connection(("127.0.0.1", ui.port), timeout=PATIENCE) as conn:
        conn.sendall(request.encode("latin-1"))
        data = b""
        while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
            data += chunk
        return data


def health(ui: UiServer, cookie: str) -> int:
    """The daemon's health asked through the page: the answer's status."""
    head = exchange(
        ui,
        f"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1:{ui.port}\r\nCookie: {cookie}\r\n"
        "Connection: close\r\n\r\n",
    )
    return int(head.split(b" ", 2)[1])


def test_a_hundred_slow_senders_are_cut_and_health_is_answered_throughout(ui: UiServer) -> None:
    cookie = login(ui)
    # Never the blank line that would end the head.
    request = f"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1:{ui.port}\r\n".encode()
    selector = selectors.DefaultSelector()
    started: dict[socket.socket, float] = {}
    lasted: list[float] = []
    for _ in range(100):
        conn = socket.create_connection(("127.0.0.1", ui.port), timeout=PATIENCE)
        conn.setblocking(False)
        selector.register(conn, selectors.EVENT_READ)
        started[conn] = time.monotonic()
    statuses: list[int] = []
    sent = 0
    give_up = time.monotonic() + LIMITS.request + MARGIN + PATIENCE
    while started and time.monotonic() < give_up:
        # One byte a second from each, never the whole request.
        for conn in list(started):
            with contextlib.suppress(OSError):  # cut: seen as readable below
                conn.send(request[sent : sent + 1])
        sent += 1
        for key, _ in selector.select(timeout=1.0):
            conn = key.fileobj
            assert isinstance(conn, socket.socket)
            try:
                data = conn.recv(65536)
            except OSError:
                data = b""
            if not data or b"\r\n\r\n" in data:
                lasted.append(time.monotonic() - started.pop(conn))
                selector.unregister(conn)
                conn.close()
        statuses.append(health(ui, cookie))
    for conn in started:
        conn.close()
    assert not started, f"{len(started)} slow senders still open"
    assert max(lasted) <= LIMITS.request + MARGIN, max(lasted)
    assert set(statuses) == {200}, statuses


@pytest.mark.skipif(not hasattr(socket, "TCP_INFO"), reason="reads TCP_INFO, which Linux has")
def test_a_client_that_never_reads_is_cut(ui: UiServer) -> None:
    cookie = login(ui)
    conn = socket.create_connection(("127.0.0.1", ui.port), timeout=PATIENCE)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    one = (
        f"GET /static/app.js HTTP/1.1\r\nHost: 127.0.0.1:{ui.port}\r\nCookie: {cookie}\r\n\r\n"
    ).encode()
    with conn:
        # Far more answer than the kernel's buffers hold, asked for and never read.
        conn.sendall(one * 200)
        stopped_reading = time.monotonic()

        def cut() -> bool:
            # The connection's state as the kernel keeps it: closed once the page's reset
            # arrived, while the answers it sent still wait unread (TCP_INFO's first byte).
            return conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == TCP_CLOSE

        wait_until(cut, "the page cuts a client that does not read", LIMITS.idle + PATIENCE)
        assert time.monotonic() - stopped_reading <= LIMITS.idle + MARGIN
    assert health(ui, cookie) == 200


def test_a_megabyte_request_line_is_refused_at_once(ui: UiServer) -> None:
    cookie = login(ui)
    with socket.create_connection(("127.0.0.1", ui.port), timeout=PATIENCE) as conn:
        began = time.monotonic()
        line = b"GET /" + b"a" * (1 << 20) + b" HTTP/1.1\r\n"
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            conn.sendall(line)  # (refused before it was all sent)
        data = read_all(conn)
        took = time.monotonic() - began
    # Refused in the page's shape and policy, or cut while it was still being sent.
    if data:
        head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1")
        assert head.startswith("HTTP/1.1 414"), head
        assert f"content-security-policy: {CSP}".lower() in head.lower()
    assert took <= LIMITS.request, took
    assert health(ui, cookie) == 200


def test_idle_connections_hold_no_thread(ui: UiServer) -> None:
    cookie = login(ui)
    before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", ui.port), timeout=PATIENCE) for _ in range(50)]
    try:
        assert health(ui, cookie) == 200
        # The page's own threads: a few workers; none for the 50 connections waiting.
        assert threading.active_count() <= before + 4, threading.enumerate()
    finally:
        for conn in idle:
            conn.close()
