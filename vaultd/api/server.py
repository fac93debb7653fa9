"""The local API: HTTP/1.1 with JSON bodies on a Unix socket only its owner can use.

The standard library's HTTP server is enough for a local, low-concurrency API, and it keeps
every limit under our control: peer credentials are checked before a byte is read, a request
must arrive whole within a deadline (a client trickling a byte every few seconds is cut off),
bodies are capped, and so are open connections. The server only calls into the daemon.

No one kind of request can lock out the rest. Open connections are capped, and when the cap
is reached the one that has waited longest for its request (an idle keep-alive, a slow
sender) is cut to make room. Requests in hand are capped below the connection cap, health and
status outside it, so a new connection always finds room for them. A search that waits
(`wait_for`) leaves both caps while it waits, for a cap of its own.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re
import selectors
import socket
import socketserver
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

import structlog

from vaultd import __version__
from vaultd.api.client import VAULT_HEADER, VAULT_PATH_HEADER, peer_uid
from vaultd.api.limits import MAX_BODY
from vaultd.api.locate import remove_record, socket_path, write_record
from vaultd.api.operations import BY_NAME, ErrorDetail, ErrorResponse, build
from vaultd.api.routes import Api, Lines
from vaultd.errors import ApiError, NotReadyError, StartupError, VaultdError
from vaultd.layout import vault_id

if TYPE_CHECKING:
    from vaultd.api.service import Service

log = structlog.get_logger(__name__)

#: A request (line, headers and body) must arrive whole within this many seconds of its first
#: byte, however the bytes are spread.
HEADER_TIMEOUT = 10.0
#: A connection waits this long for the first byte of a request, then is closed.
IDLE_TIMEOUT = 10.0
#: Open connections, long-polls aside; at the cap, the one waiting longest for its request is
#: cut. Room for a hundred slow senders without cutting one for each newcomer (clients that
#: reconnect as fast as they are cut would otherwise churn threads), and with MAX_WAITING well
#: under the usual limit of 1,024 open files.
MAX_CONNECTIONS = 128
#: Requests in hand at once, health, status and long-polls aside. Below MAX_CONNECTIONS, so a
#: full server still has connections waiting for requests, which a new one may displace.
MAX_BUSY = 64
#: Searches waiting for `wait_for` at once: a thread each, blocked, outside the caps above.
MAX_WAITING = 512
#: Event streams (`GET /v1/events`) open at once: a thread each, outside the caps above.
MAX_STREAMS = 32
#: Routes answered whatever the load: they are quick and take no slot.
ALWAYS_ANSWERED = frozenset(BY_NAME[name].route for name in ("health", "status"))
#: The longest request line read (as the standard library's handler reads it).
MAX_REQUEST_LINE = 65536
#: A method is an RFC 9110 token; anything else is not a request.
_METHOD = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: Every version this server speaks: HTTP/1.0 and 1.1 (a later 1.x is answered as 1.1).
_HTTP_1 = re.compile(r"HTTP/0*1\.[0-9]+")
#: A Content-Length is digits only. int() would also take a sign, spaces, "_" and non-ASCII
#: digits ("+5", "5 ", "5_0", "٥"), which another parser in front of us may read differently.
_LENGTH = re.compile(r"[0-9]+")


def _safe_directory(directory: Path) -> None:
    """Create the socket's directory 0700, or refuse one others could tamper with."""
    old_umask = os.umask(0o077)  # missing parents too: mkdir's mode covers only the last one
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = directory.lstat()
    except OSError as exc:
        raise StartupError(f"cannot create the socket directory {directory}: {exc}") from exc
    finally:
        os.umask(old_umask)
    if not stat.S_ISDIR(info.st_mode):
        raise StartupError(f"{directory} is not a directory")
    if info.st_uid != os.getuid():
        raise StartupError(
            f"the socket directory {directory} belongs to uid {info.st_uid}, not to you "
            f"({os.getuid()}); choose another [server] socket"
        )
    if info.st_mode & 0o022:
        raise StartupError(
            f"the socket directory {directory} is writable by others "
            f"(mode {stat.S_IMODE(info.st_mode):o}); run `chmod 700 {directory}` or choose "
            "another [server] socket"
        )


def _clear_stale(path: Path) -> None:
    """Remove a socket left by a dead daemon; called only while holding the data-dir lock."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise StartupError(f"{path} exists and is not a socket; remove it or choose another path")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except OSError as exc:
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
            path.unlink(missing_ok=True)
            return
        raise StartupError(f"cannot check the existing socket {path}: {exc}") from exc
    else:
        raise StartupError(
            f"another vaultd is already serving on {path}; give this vault its own [server] socket"
        )
    finally:
        probe.close()


class _DeadlineReader(io.RawIOBase):
    """The socket's reading side, failing once the request's deadline has passed.

    The deadline is enforced on every `recv`, below the buffered reader: a client trickling a
    byte every few seconds never lets one `readline` run past it. Waiting for a request, the
    deadline is the idle one; its first byte sets the deadline for the whole request.
    """

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._sock = sock
        self.deadline = time.monotonic() + IDLE_TIMEOUT
        #: Whether a byte of the request being read has arrived.
        self.started = False

    def expect_request(self) -> None:
        self.deadline = time.monotonic() + IDLE_TIMEOUT
        self.started = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request deadline passed")
        self._sock.settimeout(left)
        count = self._sock.recv_into(buffer)
        if count and not self.started:
            self.started = True
            self.deadline = min(self.deadline, time.monotonic() + HEADER_TIMEOUT)
        return count


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The stdlib's default, HTTP/0.9, answers a malformed request line with a bare body and no
    # status line; every answer here is a framed HTTP response.
    default_request_version = "HTTP/1.0"
    server_version = f"vaultd/{__version__}"
    server: SocketServer

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the socket's own file; ours enforces the deadline on every recv
        self.reader = _DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self.reader)
        self.slot = self.server.slot_of(self.request)
        self.slot.reader = self.reader
        self.server.current.handler = self

    def handle_one_request(self) -> None:
        # The standard library's own, but every method goes to the router, which knows each
        # route's methods (405 with an Allow header, or 404): the stdlib answers 501 to any
        # method it finds no do_* for, HEAD and OPTIONS included.
        # Waiting for the next request on a kept-alive connection: the idle timeout; once it
        # starts, the whole request must arrive within HEADER_TIMEOUT.
        self.reader.expect_request()
        self.server.waiting_for_request(self.slot)
        try:
            self.raw_requestline = self.rfile.readline(MAX_REQUEST_LINE + 1)
            if len(self.raw_requestline) > MAX_REQUEST_LINE:
                self.requestline = self.request_version = self.command = ""
                self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
                return
            if not self.raw_requestline:
                self.close_connection = True
                return
            if not self.parse_request():
                return  # answered already
            self._dispatch(self.command)
            self.wfile.flush()
        except (TimeoutError, ConnectionError):
            self.close_connection = True
        except OSError:
            if not self.slot.cut:
                raise
            self.close_connection = True  # cut to make room: its socket was shut down

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if not _METHOD.fullmatch(self.command):
            self.send_error(HTTPStatus.BAD_REQUEST, f"not a method: {self.command[:40]!r}")
            return False
        if not _HTTP_1.fullmatch(self.request_version):
            # HTTP/0.9 and 0.x: the stdlib takes them, and would answer 0.9 without a status line.
            version = self.request_version
            self.request_version = self.default_request_version
            self.send_error(HTTPStatus.BAD_REQUEST, f"unsupported HTTP version {version[:20]!r}")
            return False
        return True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("request", line=format % args)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # Errors raised by the base class (bad request line, too-long headers) as JSON too.
        status = HTTPStatus(code)
        if status == HTTPStatus.HTTP_VERSION_NOT_SUPPORTED:
            # HTTP/2.0 and later on this request line: a malformed request for this server,
            # which speaks HTTP/1.x only (5xx would blame the server for the client's line).
            status = HTTPStatus.BAD_REQUEST
            message = f"{message or 'unsupported HTTP version'}; this API speaks HTTP/1.1"
        self.close_connection = True
        with contextlib.suppress(OSError):
            self._send(status, _error_body(status.name.lower(), message or status.phrase))

    # -- dispatch ------------------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        started = time.perf_counter()
        try:
            # A body that does not arrive in time raises TimeoutError: the connection is cut.
            body = self._read_body()
        except ApiError as exc:
            self._send(exc.status, _refused(exc))
            return
        if not self.server.serving(self.slot):
            self.close_connection = True  # cut to make room while its request arrived
            return
        headers: dict[str, str] = {}
        try:
            with self.server.busy(urlsplit(self.path).path):
                status, payload = self.server.api.handle(method, self.path, body)
        except ApiError as exc:
            status, payload = exc.status, _refused(exc)
            if exc.allow:
                headers["Allow"] = ", ".join(exc.allow)
        except NotReadyError as exc:
            status, payload = HTTPStatus.SERVICE_UNAVAILABLE, _error_body("not_ready", str(exc))
        except VaultdError as exc:
            status, payload = HTTPStatus.SERVICE_UNAVAILABLE, _error_body("unavailable", str(exc))
        except Exception:
            log.exception("request failed", path=self.path)
            status = HTTPStatus.INTERNAL_SERVER_ERROR
            payload = _error_body("internal", "internal error; see the daemon's log")
        self._send(status, payload, headers)
        log.debug(
            "served",
            method=method,
            path=self.path,
            status=int(status),
            ms=round((time.perf_counter() - started) * 1000, 1),
        )

    def _read_body(self) -> bytes:
        # Every refusal here ends the connection: what follows could not be told from the body.
        if self.headers.get("Transfer-Encoding"):
            raise self._ending(
                HTTPStatus.LENGTH_REQUIRED,
                "length_required",
                "send the body with a Content-Length, not chunked",
            )
        lengths = self.headers.get_all("Content-Length") or []
        if len(lengths) > 1:
            # Equal or not: a proxy in front may take the other one, and the rest of this body
            # would be read as a second request (request smuggling).
            raise self._ending(400, "bad_request", "send exactly one Content-Length header")
        if not lengths:
            return b""
        if not _LENGTH.fullmatch(lengths[0]):
            raise self._ending(
                400,
                "bad_request",
                f"invalid Content-Length {lengths[0][:40]!r}: send the body's size in digits only",
            )
        digits = lengths[0].lstrip("0")
        # More digits than MAX_BODY has is over it, however many (int() refuses 4,300 and more).
        length = MAX_BODY + 1 if len(digits) > len(str(MAX_BODY)) else int(digits or "0")
        if length > MAX_BODY:
            raise self._ending(413, "too_large", f"request bodies are limited to {MAX_BODY} bytes")
        data = self.rfile.read(length)
        if len(data) < length:
            raise self._ending(400, "bad_request", "the body ended early")
        return data

    def _ending(self, status: int, code: str, message: str) -> ApiError:
        self.close_connection = True
        return ApiError(HTTPStatus(status), code, message)

    def _send(
        self, status: HTTPStatus, payload: Any, headers: Mapping[str, str] | None = None
    ) -> None:
        if isinstance(payload, Lines):
            (self._events if payload.sse else self._stream)(status, payload)
            return
        data = json.dumps(payload, ensure_ascii=False).encode()
        self._head(
            status, "application/json", {"Content-Length": str(len(data)), **(headers or {})}
        )
        if self.command != "HEAD":  # a HEAD answer has the headers of a body, never the body
            self.wfile.write(data)

    def _head(self, status: HTTPStatus, content_type: str, headers: Mapping[str, str]) -> None:
        # Reads armed the socket with what was left of their deadline; writing gets its own.
        self.connection.settimeout(IDLE_TIMEOUT)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        # Which vault answered: clients refuse an answer from another vault's daemon.
        self.send_header(VAULT_HEADER, self.server.vault_id)
        self.send_header(VAULT_PATH_HEADER, self.server.vault_path)
        for name, value in headers.items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()

    def _stream(self, status: HTTPStatus, payload: Lines) -> None:
        """JSON lines in chunks as they are made: an export of a big vault is never held whole."""
        self._head(status, "application/x-ndjson", {"Transfer-Encoding": "chunked"})
        try:
            batch: list[bytes] = []
            for item in payload.items:
                batch.append(json.dumps(item, ensure_ascii=False, sort_keys=True).encode() + b"\n")
                if len(batch) >= 256:
                    self._chunk(b"".join(batch))
                    batch = []
            if batch:
                self._chunk(b"".join(batch))
        except VaultdError as exc:
            # The status line is gone: end the body early, so the client sees a truncated
            # stream (no final empty chunk) rather than a complete one.
            log.error("export failed", error=str(exc))
            self.close_connection = True
            return
        self.wfile.write(b"0\r\n\r\n")

    def _events(self, status: HTTPStatus, payload: Lines) -> None:
        """Server-sent events until the client goes away or the server stops. The connection
        leaves the caps of requests (it is closed after the stream) for MAX_STREAMS; a client
        that stops reading is cut once a write has waited IDLE_TIMEOUT, one that hangs up is
        ended at once (`Hangups`), and one that vanished silently at the next event or
        heartbeat. Either way only this thread ever writes to it."""
        try:
            if not self.server.streams.acquire(blocking=False):
                self.close_connection = True
                self._send(
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    _error_body("busy", f"{MAX_STREAMS} event streams are open already"),
                )
                return
            watched = False
            try:
                self.server.leave(self.slot)
                self.close_connection = True
                self._head(
                    status, "text/event-stream; charset=utf-8", {"Cache-Control": "no-store"}
                )
                self.wfile.flush()
                if payload.end is not None:
                    self.server.hangups.watch(self.connection, payload.end)
                    watched = True
                for item in payload.items:
                    self.wfile.write(_sse(item))
                    self.wfile.flush()
            except OSError:
                pass  # gone, or not reading: its subscription ends below
            finally:
                if watched:
                    self.server.hangups.forget(self.connection)
                self.server.streams.release()
        finally:
            payload.items.close()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


def _sse(item: Mapping[str, Any]) -> bytes:
    """One item as an event: a heartbeat as a comment line, anything else with its kind as the
    event's name, its number as the id and the item as JSON data (one line)."""
    kind = str(item.get("kind", "message"))
    if kind == "ping":
        return b": ping\n\n"
    data = json.dumps(item, ensure_ascii=False)
    seq = item.get("seq")
    head = f"id: {seq}\n" if seq else ""
    return f"{head}event: {kind}\ndata: {data}\n\n".encode()


def _error_body(
    code: str, message: str, kind: str | None = None, field: str | None = None
) -> dict[str, Any]:
    error = ErrorDetail(code=code, message=message, kind=kind, field=field)
    return ErrorResponse(error=error).model_dump(exclude_none=True)


def _refused(exc: ApiError) -> dict[str, Any]:
    return _error_body(exc.code, exc.message, exc.kind, exc.field)


@dataclass(eq=False)
class _Slot:
    """One connection's place under MAX_CONNECTIONS."""

    sock: socket.socket
    #: When it began waiting for its current request (the oldest waiting is cut first).
    idle_since: float = field(default_factory=time.monotonic)
    #: Whether a request of it is in hand (not to be cut) rather than awaited.
    serving: bool = False
    #: Cut to make room for another connection.
    cut: bool = False
    reader: _DeadlineReader | None = None


def _busy(why: str) -> ApiError:
    return ApiError(HTTPStatus.SERVICE_UNAVAILABLE, "busy", f"{why}; ask again in a moment")


def _busy_reply(message: str) -> bytes:
    body = json.dumps(_error_body("busy", message)).encode()
    return (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


class Hangups:
    """Ends an event stream as soon as its client hangs up.

    A stream's thread waits for the next event, not on its socket, so on its own it would
    learn of a hang-up only when its next write failed (an event, or the heartbeat 15 s on)
    and would hold its place under MAX_STREAMS until then. One thread watches every open
    stream's socket instead: at end of file it ends that stream's answer, which wakes the
    stream's thread at once. A client that sends anything after its request is left to the
    heartbeat (it is not hanging up, and a socket that stays readable would spin the watch).
    """

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def watch(self, sock: socket.socket, end: Callable[[], None]) -> None:
        with self._lock:
            if self._closed:
                return
            self._selector.register(sock, selectors.EVENT_READ, end)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hangups", daemon=True)
                self._thread.start()

    def forget(self, sock: socket.socket) -> None:
        """Stop watching `sock`; before it is closed, whose number may be reused at once."""
        with self._lock, contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(sock)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        with contextlib.suppress(OSError):
            self._wake_write.send(b"!")
        if thread is not None:
            thread.join(5)
        self._selector.close()
        self._wake_read.close()
        self._wake_write.close()

    def _run(self) -> None:
        while True:
            ready = self._selector.select()
            with self._lock:
                if self._closed:
                    return
                for key, _ in ready:
                    if key.data is not None:
                        self._look(key.fileobj, key.data)  # type: ignore[arg-type]

    def _look(self, sock: socket.socket, end: Callable[[], None]) -> None:
        # Under the lock: `forget` cannot pass between the look and the unregister.
        try:
            hung_up = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return
        except OSError:
            hung_up = True
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(sock)
        if hung_up:
            end()


class SocketServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = False
    # Room for bursts of hundreds of clients: a full queue fails a Unix socket's connect at once
    # (EAGAIN), which a client reads as no daemon at all. The kernel caps it at somaxconn.
    request_queue_size = 1024

    def __init__(self, path: Path, api: Api, vault: Path) -> None:
        self.path = path
        self.api = api
        api.waiting = self.long_poll
        self.vault_id = vault_id(vault)
        self.vault_path = quote(str(vault), safe="/")
        #: The data directory holding this server's record (see vaultd.api.locate), once written.
        self.record_dir: Path | None = None
        self._lock = threading.Lock()
        self._open: dict[socket.socket, _Slot] = {}
        self._busy = threading.BoundedSemaphore(MAX_BUSY)
        self._waiting = threading.BoundedSemaphore(MAX_WAITING)
        #: Event streams open (see Handler._events).
        self.streams = threading.BoundedSemaphore(MAX_STREAMS)
        self.hangups = Hangups()
        #: The connection this thread serves (a thread per connection) and the slots it holds.
        self.current = threading.local()
        self._uid = os.getuid()
        old_umask = os.umask(0o177)  # the socket is born 0600 whatever the caller's umask
        try:
            super().__init__(str(path), Handler)
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)

    def verify_request(self, request: Any, client_address: Any) -> bool:
        uid = peer_uid(request)
        if uid is not None and uid != self._uid:
            log.warning("refused a connection from another user", uid=uid)
            return False
        with self._lock:
            victim = None
            if len(self._open) >= MAX_CONNECTIONS:
                waiting = (slot for slot in self._open.values() if not slot.serving)
                victim = min(waiting, key=lambda slot: slot.idle_since, default=None)
                if victim is not None:
                    # Its place passes to the newcomer now; its thread ends once cut.
                    victim.cut = True
                    del self._open[victim.sock]
            if victim is not None or len(self._open) < MAX_CONNECTIONS:
                self._open[request] = _Slot(request)
                admitted = True
            else:
                admitted = False
        if victim is not None:
            self._cut(victim)
        if not admitted:
            # Only when MAX_CONNECTIONS requests are in hand at once, which MAX_BUSY rules
            # out but for a burst of health and status requests.
            with contextlib.suppress(OSError):
                request.sendall(_busy_reply("too many connections"))
        return admitted

    def _cut(self, slot: _Slot) -> None:
        with contextlib.suppress(OSError):
            if slot.reader is not None and slot.reader.started:
                # Never blocking the accepting thread on a client that does not read.
                slot.sock.send(
                    _busy_reply("cut to make room for another connection"), socket.MSG_DONTWAIT
                )
        with contextlib.suppress(OSError):
            slot.sock.shutdown(socket.SHUT_RDWR)  # wakes its thread's recv

    def slot_of(self, request: socket.socket) -> _Slot:
        with self._lock:
            found = self._open.get(request)
        return found if found is not None else _Slot(request, cut=True)

    def waiting_for_request(self, slot: _Slot) -> None:
        with self._lock:
            slot.serving = False
            slot.idle_since = time.monotonic()

    def serving(self, slot: _Slot) -> bool:
        """Mark the slot's request as in hand; False when it was cut meanwhile."""
        with self._lock:
            slot.serving = not slot.cut
            return slot.serving

    @contextlib.contextmanager
    def busy(self, path: str) -> Iterator[None]:
        """Hold one of MAX_BUSY for a request to `path` (none for health and status)."""
        if path in ALWAYS_ANSWERED:
            yield
            return
        if not self._busy.acquire(blocking=False):
            raise _busy(f"{MAX_BUSY} requests are in hand already")
        self.current.busy = True
        try:
            yield
        finally:
            if self.current.busy:
                self.current.busy = False
                self._busy.release()

    @contextlib.contextmanager
    def long_poll(self) -> Iterator[None]:
        """Around a search's wait for `wait_for`: out of the caps quick requests share (its
        connection ends with its answer), into MAX_WAITING; back under MAX_BUSY to search."""
        handler: Handler | None = getattr(self.current, "handler", None)
        if handler is None:  # not on a connection's thread
            yield
            return
        if not self._waiting.acquire(blocking=False):
            raise _busy(f"{MAX_WAITING} searches are waiting already")
        if getattr(self.current, "busy", False):
            self.current.busy = False
            self._busy.release()
        self.leave(handler.slot)
        handler.close_connection = True
        try:
            yield
        finally:
            self._waiting.release()
        if not self._busy.acquire(timeout=HEADER_TIMEOUT):
            raise _busy(f"{MAX_BUSY} requests are in hand already")
        self.current.busy = True

    def leave(self, slot: _Slot) -> None:
        """Take the connection out of MAX_CONNECTIONS (a long poll, an event stream)."""
        with self._lock:
            if self._open.get(slot.sock) is slot:
                del self._open[slot.sock]

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.leave(self.slot_of(request))

    def close(self) -> None:
        if self.record_dir is not None:
            remove_record(self.record_dir)
        self.shutdown()
        self.server_close()
        self.hangups.close()
        with contextlib.suppress(OSError):
            self.path.unlink()


def daemon_socket_path(config: Any, env: Mapping[str, str]) -> Path:
    """The socket the daemon for `config`'s vault listens on."""
    return socket_path(config.server.socket, env, config.require_store(), config.require_vault())


def check_socket_path(config: Any, env: Mapping[str, str]) -> Path:
    """Validate the socket's path and directory (StartupError when unusable)."""
    path = daemon_socket_path(config, env)
    _safe_directory(path.parent)
    return path


def start_server(service: Service, config: Any, env: Mapping[str, str]) -> SocketServer:
    path = check_socket_path(config, env)
    _clear_stale(path)
    build()
    server = SocketServer(path, Api(service), service.vault)
    thread = threading.Thread(target=server.serve_forever, name="vaultd-server", daemon=True)
    thread.start()
    # Once it answers: a client that cannot compute the path (another environment) reads it.
    write_record(service.data_dir, path, service.vault)
    server.record_dir = service.data_dir
    return server
