"""ASGI in the few words vaultd's two servers need, and uvicorn on a thread of its own.

Both servers (the API on its Unix socket, the page on loopback TCP) are plain ASGI
applications: a request is read whole (its guards have capped its size and its time), an
answer is a start message and its body, and a long answer races the client's going away.
`Served` runs one of them with uvicorn on an event loop in a thread, from `start` until
`close`, so neither the daemon's nor `vaultd ui`'s lifecycle (signals, notify, ExitStack)
changes: uvicorn captures signals only on the main thread, which stays theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from http import HTTPStatus
from typing import Any, TypeVar

import uvicorn

from vaultd.errors import StartupError

T = TypeVar("T")
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Application = Callable[[Message, Receive, Send], Awaitable[None]]


async def body(receive: Receive) -> bytes | None:
    """The request's body (the guards have capped its length and its time); None if the
    client went away."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def start(status: HTTPStatus | int, fields: Mapping[str, str]) -> Message:
    headers = [(name.encode(), value.encode("latin-1")) for name, value in fields.items()]
    return {"type": "http.response.start", "status": int(status), "headers": headers}


async def send_whole(
    send: Send, status: HTTPStatus | int, data: bytes, fields: Mapping[str, str]
) -> None:
    """An answer in one piece, with its length (uvicorn sends no body after a HEAD's head)."""
    await send(start(status, {**fields, "Content-Length": str(len(data))}))
    await send({"type": "http.response.body", "body": data})


async def _gone(receive: Receive, *, done_sending: bool) -> None:
    """Returns once the client has gone, or with `done_sending` once it has also just stopped
    sending (closed its side): all a stream's client can say after its request."""
    while (await receive())["type"] != "http.disconnect":
        if done_sending:
            return


async def unless_gone(
    work: Coroutine[Any, Any, T],
    receive: Receive,
    *,
    done_sending: bool,
    stop: asyncio.Event | None = None,
) -> T | None:
    """`work`'s result, or None (`work` cancelled, and over) once the client is gone (see
    `_gone`) or `stop` is set."""
    first = asyncio.ensure_future(work)
    tasks: list[asyncio.Future[Any]] = [first]
    tasks.append(asyncio.ensure_future(_gone(receive, done_sending=done_sending)))
    if stop is not None:
        tasks.append(asyncio.ensure_future(stop.wait()))
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        # Over before the caller goes on: it may close what `work` was reading.
        await asyncio.wait(tasks)
    return first.result() if not first.cancelled() else None


class _Server(uvicorn.Server):
    """uvicorn's server, saying when it listens."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.listening.set()


class Served:
    """`app` served by uvicorn on `sock` with the connection protocol `protocol`, on an event
    loop in a thread of its own, from `start` until `close`. `on_loop` runs on the loop before
    it serves; `on_stop` on the loop when a stop is asked, before uvicorn drains."""

    def __init__(
        self,
        app: Application,
        protocol: type[asyncio.Protocol],
        sock: socket.socket,
        *,
        name: str,
        headers: Sequence[tuple[str, str]] = (),
        grace: float,
        on_loop: Callable[[asyncio.AbstractEventLoop], None] | None = None,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        config = uvicorn.Config(
            app,
            http=protocol,
            ws="none",
            lifespan="off",
            interface="asgi3",
            # The caller's logging stays its own: uvicorn's errors reach it, not its notices
            # (a refused request is the client's, answered in full).
            log_config=None,
            log_level=logging.ERROR,
            access_log=False,
            proxy_headers=False,
            server_header=False,
            headers=list(headers),
            # Room for bursts of hundreds of clients: a full queue fails a Unix socket's
            # connect at once (EAGAIN), which a client reads as no server at all.
            backlog=1024,
            timeout_graceful_shutdown=max(1, int(grace)),
        )
        self.grace = grace
        self.sock = sock
        #: Set once the server has stopped serving (or failed to start).
        self.stopped = threading.Event()
        self._server = _Server(config)
        self._on_loop = on_loop
        self._on_stop = on_stop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._server.listening.wait()
        if not self._server.started:
            where = self.sock.getsockname()
            raise StartupError(f"the server on {where} did not start; see the log")

    def _run(self) -> None:
        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            if self._on_loop is not None:
                self._on_loop(self._loop)
            await self._server.serve(sockets=[self.sock])

        try:
            asyncio.run(serve())
        finally:
            self._server.listening.set()  # a start that failed is not waited for
            self.stopped.set()

    def stop(self) -> None:
        """Ask it to stop, from any thread (a signal handler's too); returns at once."""
        loop = self._loop
        if loop is not None and not self.stopped.is_set():
            with contextlib.suppress(RuntimeError):  # its loop closed meanwhile
                loop.call_soon_threadsafe(self._stop)

    def _stop(self) -> None:
        if self._on_stop is not None:
            self._on_stop()
        self._server.should_exit = True

    def close(self) -> None:
        """Stop, wait for the answers in hand (up to the grace and a little), close the socket."""
        self.stop()
        if self._thread.is_alive():
            self._thread.join(self.grace + 5)
        self.sock.close()
