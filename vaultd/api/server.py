"""The local API: HTTP/1.1 with JSON bodies on a Unix socket only its owner can use.

uvicorn serves it on an event loop in a thread of the daemon's: h11 frames the requests, the
connection's guards (vaultd.api.protocol) check the peer's uid before a byte is read, hold each
request to its deadlines and caps and answer what they refuse in the API's error shape, and the
application below routes each request by the operation table (vaultd.api.routes) and holds the
caps on what is in hand. Plain ASGI, not Starlette: the routes are the operation table's, and a
response here is two messages that Starlette's router, requests and responses would only wrap.

No kind of request can lock out the rest, and none holds a thread while it waits. The index is
read in a pool of WORKERS threads, by at most MAX_BUSY requests in hand at once; health and
status have a lane of their own and take no slot; a search that waits (`wait_for`) awaits the
daemon's state outside MAX_BUSY, MAX_WAITING at once; an event stream awaits the daemon's event
hub, MAX_STREAMS at once; and a new connection always finds room, cutting the one that has
waited longest for its request when MAX_CONNECTIONS are waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import socket
import stat
import time
from collections.abc import AsyncGenerator, Generator, Mapping
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

import structlog

from vaultd import __version__
from vaultd.api import asgi
from vaultd.api.asgi import Message, Receive, Send, Served
from vaultd.api.client import VAULT_HEADER, VAULT_PATH_HEADER
from vaultd.api.limits import MAX_BODY
from vaultd.api.locate import remove_record, socket_path, write_record
from vaultd.api.operations import BY_NAME, ErrorDetail, ErrorResponse, build
from vaultd.api.protocol import GuardedProtocol, Limits, Refusal
from vaultd.api.routes import Api, Call, Lines
from vaultd.errors import ApiError, NotReadyError, StartupError, VaultdError
from vaultd.layout import vault_id

if TYPE_CHECKING:
    from vaultd.api.service import Service

__all__ = ["Api", "Lines", "SocketServer", "check_socket_path", "start_server"]

log = structlog.get_logger(__name__)
T = TypeVar("T")

#: A request (line, headers and body) must arrive whole within this many seconds of its first
#: byte, however the bytes are spread.
HEADER_TIMEOUT = 10.0
#: A connection waits this long for the first byte of a request, and a write this long for the
#: client to read, then the connection is closed.
IDLE_TIMEOUT = 10.0
#: Connections waiting for a request (idle, or one still arriving); a new one past it cuts the
#: one that has waited longest, so a new connection always finds room.
MAX_CONNECTIONS = 128
#: Requests in hand at once (waiting for a worker thread, or in one), health, status, event
#: streams and searches waiting for `wait_for` aside.
MAX_BUSY = 64
#: Threads reading the index for requests in hand; the rest of MAX_BUSY wait their turn.
WORKERS = 8
#: Searches waiting for `wait_for` at once: awaits, not threads.
MAX_WAITING = 512
#: Event streams (`GET /v1/events`) open at once: awaits, not threads.
MAX_STREAMS = 32
#: Routes answered whatever the load, in a lane of their own: they are quick and take no slot.
ALWAYS_ANSWERED = frozenset(BY_NAME[name].route for name in ("health", "status"))
#: A request's line and headers, in bytes, and its header fields.
MAX_HEAD = 65536
MAX_FIELDS = 100
#: How long a stop waits for the answers in hand before it cuts them.
STOP_GRACE = 5.0
#: JSON lines sent in one piece of a streamed answer.
BATCH = 256


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


def _listening(path: Path) -> socket.socket:
    """The socket bound at `path`, 0600 from its first moment whatever the caller's umask."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        sock.bind(str(path))
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    return sock


def _error_body(
    code: str, message: str, kind: str | None = None, field: str | None = None
) -> dict[str, Any]:
    error = ErrorDetail(code=code, message=message, kind=kind, field=field)
    return ErrorResponse(error=error).model_dump(exclude_none=True)


def _busy(why: str) -> ApiError:
    return ApiError(HTTPStatus.SERVICE_UNAVAILABLE, "busy", f"{why}; ask again in a moment")


class ApiProtocol(GuardedProtocol):
    """The API's connections: the guards with the API's limits and error shape."""

    limits = Limits(
        idle=IDLE_TIMEOUT,
        request=HEADER_TIMEOUT,
        head=MAX_HEAD,
        fields=MAX_FIELDS,
        body=MAX_BODY,
        waiting=MAX_CONNECTIONS,
    )

    def refused(self, refusal: Refusal) -> tuple[bytes, bytes]:
        body = _error_body(refusal.code, refusal.message)
        return b"application/json", json.dumps(body, ensure_ascii=False).encode()


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


def _batch(items: Generator[Any, None, None]) -> bytes:
    """The next BATCH items as JSON lines (none left: b"")."""
    lines = []
    for item in items:
        lines.append(json.dumps(item, ensure_ascii=False, sort_keys=True).encode() + b"\n")
        if len(lines) >= BATCH:
            break
    return b"".join(lines)


class _Gone(Exception):
    """The client went away before its answer: nobody to send it to."""


class App:
    """The ASGI application (see the module): each request routed on the event loop, its
    answer read in a worker thread, sent as JSON, JSON lines or server-sent events."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.work = ThreadPoolExecutor(WORKERS, thread_name_prefix="vaultd-api")
        self.lane = ThreadPoolExecutor(2, thread_name_prefix="vaultd-api-lane")
        self.stopping = asyncio.Event()
        self._busy = asyncio.Semaphore(MAX_BUSY)
        self._waiting = 0
        self._streams = 0

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = await asgi.body(receive)
        if body is None:
            return
        started = time.perf_counter()
        target = scope["raw_path"].decode("ascii")
        if scope["query_string"]:
            target += "?" + scope["query_string"].decode("ascii")
        try:
            status, payload, headers = await self._answer(scope["method"], target, body, receive)
        except _Gone:
            return
        if isinstance(payload, Lines):
            await (self._events if payload.sse else self._lines)(status, payload, receive, send)
        else:
            await self._json(send, status, payload, headers)
        log.debug(
            "served",
            method=scope["method"],
            path=target,
            status=int(status),
            ms=round((time.perf_counter() - started) * 1000, 1),
        )

    async def _answer(
        self, method: str, target: str, body: bytes, receive: Receive
    ) -> tuple[HTTPStatus, Any, dict[str, str]]:
        """The answer's status, payload and headers, the refusals' included."""
        try:
            return *await self._dispatch(method, target, body, receive), {}
        except ApiError as exc:
            allow = {"Allow": ", ".join(exc.allow)} if exc.allow else {}
            return exc.status, _error_body(exc.code, exc.message, exc.kind, exc.field), allow
        except NotReadyError as exc:
            return HTTPStatus.SERVICE_UNAVAILABLE, _error_body("not_ready", str(exc)), {}
        except VaultdError as exc:
            return HTTPStatus.SERVICE_UNAVAILABLE, _error_body("unavailable", str(exc)), {}
        except _Gone:
            raise
        except Exception:
            log.exception("request failed", path=target)
            body_ = _error_body("internal", "internal error; see the daemon's log")
            return HTTPStatus.INTERNAL_SERVER_ERROR, body_, {}

    async def _dispatch(
        self, method: str, target: str, body: bytes, receive: Receive
    ) -> tuple[HTTPStatus, Any]:
        # Routing and checking the request are quick and read nothing: on the loop.
        call = self.api.route(method, target, body)
        if call.op.route in ALWAYS_ANSWERED:
            return await self._run(self.lane, call)
        if call.op.sse:
            # Subscribing is quick; the stream is awaited here (`_events`).
            if self._streams >= MAX_STREAMS:
                raise _busy(f"{MAX_STREAMS} event streams are open already")
            return self.api.answer(call)
        if call.waits is None and self._busy.locked():
            raise _busy(f"{MAX_BUSY} requests are in hand already")
        if call.waits is not None:
            await self._long_poll(call, receive)
        try:
            # Only a search done waiting waits here: let in within the request deadline
            # rather than refused after its wait.
            async with asyncio.timeout(HEADER_TIMEOUT):
                await self._busy.acquire()
        except TimeoutError:
            raise _busy(f"{MAX_BUSY} requests are in hand already") from None
        try:
            return await self._run(self.work, call)
        finally:
            self._busy.release()

    async def _run(self, pool: Executor, call: Call) -> tuple[HTTPStatus, Any]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(pool, self.api.answer, call)

    async def _long_poll(self, call: Call, receive: Receive) -> None:
        """Await the search's `wait_for` (MAX_WAITING at once); a client that goes away ends
        it, one that only closes its sending side is still answered."""
        if self._waiting >= MAX_WAITING:
            raise _busy(f"{MAX_WAITING} searches are waiting already")
        self._waiting += 1
        try:
            waited = await asgi.unless_gone(
                self._waited(call), receive, done_sending=False, stop=self.stopping
            )
        finally:
            self._waiting -= 1
        if waited is None:
            if self.stopping.is_set():
                raise NotReadyError("the daemon is stopping; ask again once it runs")
            raise _Gone

    async def _waited(self, call: Call) -> bool:
        await self.api.wait(call)
        return True

    async def _json(
        self, send: Send, status: HTTPStatus, payload: Any, headers: Mapping[str, str]
    ) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        await asgi.send_whole(send, status, data, {"Content-Type": "application/json", **headers})

    async def _events(
        self, status: HTTPStatus, payload: Lines, receive: Receive, send: Send
    ) -> None:
        """Server-sent events until the client hangs up (or stops sending: a stream's client
        has nothing more to say), its stream ends or the server stops; then the connection
        closes. One that does not read is cut by its guards once a write has waited."""
        items = payload.items
        assert isinstance(items, AsyncGenerator)
        self._streams += 1
        try:
            fields = {"Content-Type": "text/event-stream; charset=utf-8"}
            fields |= {"Cache-Control": "no-store", "Connection": "close"}
            await send(asgi.start(status, fields))
            pumped = self._pump(items, send)
            await asgi.unless_gone(pumped, receive, done_sending=True, stop=self.stopping)
            await send({"type": "http.response.body", "body": b""})
        finally:
            self._streams -= 1
            await items.aclose()

    async def _pump(self, items: AsyncGenerator[Any, None], send: Send) -> None:
        async for item in items:
            await send({"type": "http.response.body", "body": _sse(item), "more_body": True})

    async def _lines(
        self, status: HTTPStatus, payload: Lines, receive: Receive, send: Send
    ) -> None:
        """JSON lines as they are read, a batch at a time in a worker thread: an export of a
        big vault is never held whole. A read that fails ends the body early, so the client
        sees a truncated answer (no final chunk) rather than a complete one."""
        items = payload.items
        assert isinstance(items, Generator)
        batch: Future[bytes] | None = None

        async def pump() -> None:
            nonlocal batch
            while True:
                batch = self.work.submit(_batch, items)
                data = await asyncio.wrap_future(batch)
                if not data:
                    return
                await send({"type": "http.response.body", "body": data, "more_body": True})

        try:
            await send(asgi.start(status, {"Content-Type": "application/x-ndjson"}))
            await asgi.unless_gone(pump(), receive, done_sending=False)
        except VaultdError as exc:
            log.error("export failed", error=str(exc))
            raise
        finally:
            if batch is not None and not batch.done():
                # A batch being read when the client left: the reader ends with it.
                with contextlib.suppress(Exception):
                    await asyncio.wrap_future(batch)
            items.close()
        await send({"type": "http.response.body", "body": b""})


class SocketServer:
    """The API served on `path`, from `start` until `close`."""

    def __init__(self, path: Path, api: Api, vault: Path) -> None:
        self.path = path
        #: The data directory holding this server's record (see vaultd.api.locate), once written.
        self.record_dir: Path | None = None
        self.app = App(api)
        # Which vault answered, on every answer (refusals too): clients refuse an answer from
        # another vault's daemon.
        headers = [
            ("server", f"vaultd/{__version__}"),
            (VAULT_HEADER, vault_id(vault)),
            (VAULT_PATH_HEADER, quote(str(vault), safe="/")),
        ]
        self._served = Served(
            self.app,
            ApiProtocol,
            _listening(path),
            name="vaultd-server",
            headers=headers,
            grace=STOP_GRACE,
            # Blocking work the daemon's side awaits (a long poll's look) runs in the pool.
            on_loop=lambda loop: loop.set_default_executor(self.app.work),
            on_stop=self.app.stopping.set,
        )

    def start(self) -> None:
        self._served.start()

    def close(self) -> None:
        if self.record_dir is not None:
            remove_record(self.record_dir)
        self._served.close()
        # After the last answer: nothing reads the index once the daemon closes it.
        for pool in (self.app.work, self.app.lane):
            pool.shutdown(wait=True, cancel_futures=True)
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
    server.start()
    # Once it answers: a client that cannot compute the path (another environment) reads it.
    write_record(service.data_dir, path, service.vault)
    server.record_dir = service.data_dir
    return server
