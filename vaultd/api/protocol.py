"""HTTP/1.1 connections held to a local server's limits: uvicorn's h11 protocol, guarded.

h11 frames the requests (request line, headers, Content-Length bodies, keep-alive, pipelining)
and uvicorn runs the application. This adds what a server on a user's own socket must hold to,
each where it can be held before the application sees a byte:

- the peer's uid is asked of the kernel when the connection is made, and another user's
  connection is dropped before anything is read;
- a connection waits `idle` seconds for a request's first byte, and the request (head and body)
  must then arrive whole within `request` seconds, however its bytes are spread;
- the head is checked as it was sent, before h11 reads it: its size and number of fields, one
  Content-Length of digits only and within the body's cap, no Transfer-Encoding. h11 would
  merge two equal lengths, take `19,19` as 19 and strip spaces around one: a proxy in front
  may read those otherwise, and the rest of the body as a request of its own;
- too many connections waiting for a request (idle, or one still arriving) cut those that
  have waited longest, so a new connection always finds room;
- a response the client does not read is cut once a write has waited `idle` seconds;
- every refusal, h11's own included, is answered in the server's error shape, and closes.

Each server subclasses it with its limits, its error shape and how it knows a peer's owner:
the API from its Unix socket's credentials, the page (loopback TCP) from the kernel's socket
tables, where an owner that cannot be known is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import struct
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, ClassVar, cast

import h11
import structlog
from uvicorn.protocols.http.h11_impl import H11Protocol

from vaultd.api.client import peer_uid

log = structlog.get_logger(__name__)

#: The blank line that ends a head, as h11 finds it (it takes a bare LF too).
_HEAD_END = re.compile(rb"\n\r?\n")
#: Seconds a new connection has to send something before it counts as idle, so may be cut to
#: make room: the event loop accepts a burst of connections before it reads any of them.
GRACE = 0.5
#: A Content-Length is digits only. int() would also take a sign, spaces, "_" and non-ASCII
#: digits ("+5", "5 ", "5_0", "٥"), which another parser in front of us may read differently.
_DIGITS = re.compile(rb"[0-9]+")


@dataclass(frozen=True, slots=True)
class Limits:
    #: Seconds a connection waits for a request's first byte, and a write for the client to read.
    idle: float
    #: Seconds a request (line, headers and body) has to arrive whole, from its first byte.
    request: float
    #: Bytes of a request's line and headers.
    head: int
    #: Header fields of a request.
    fields: int
    #: Bytes of a request's body.
    body: int
    #: Connections waiting for a request at once; a new one past it cuts the longest waiting.
    waiting: int


@dataclass(frozen=True, slots=True)
class Refusal:
    status: HTTPStatus
    code: str
    message: str


def refusal_of_head(buffer: bytes, limits: Limits) -> Refusal | None:
    """What the head at the start of `buffer` breaks of `limits`, if anything (None too while
    it has not all arrived and is within them)."""
    end = _HEAD_END.search(buffer)
    size = len(buffer) if end is None else end.start()
    if size > limits.head:
        if b"\n" not in buffer[: limits.head]:
            return Refusal(
                HTTPStatus.REQUEST_URI_TOO_LONG,
                "request_uri_too_long",
                f"the request line is longer than {limits.head} bytes",
            )
        return _too_large(f"the request's headers are longer than {limits.head} bytes")
    if end is None:
        return None
    lines = [line.rstrip(b"\r") for line in buffer[:size].split(b"\n")[1:]]
    if len(lines) > limits.fields:
        return _too_large(f"a request has at most {limits.fields} header fields")
    named = [line.partition(b":") for line in lines]
    if any(name.lower() == b"transfer-encoding" for name, _, _ in named):
        return Refusal(
            HTTPStatus.LENGTH_REQUIRED,
            "length_required",
            "send the body with a Content-Length, not chunked",
        )
    lengths = [v.lstrip(b" \t") for name, _, v in named if name.lower() == b"content-length"]
    if len(lengths) > 1:
        # Equal or not: a proxy in front may take the other one (request smuggling).
        return _bad("send exactly one Content-Length header")
    if not lengths:
        return None
    if not _DIGITS.fullmatch(lengths[0]):
        shown = lengths[0][:40].decode("latin-1")
        return _bad(f"invalid Content-Length {shown!r}: send the body's size in digits only")
    digits = lengths[0].lstrip(b"0")
    # More digits than the cap has is over it, however many (int() refuses 4,300 and more).
    if len(digits) > len(str(limits.body)) or int(digits or b"0") > limits.body:
        return Refusal(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            "too_large",
            f"request bodies are limited to {limits.body} bytes",
        )
    return None


def _bad(message: str) -> Refusal:
    return Refusal(HTTPStatus.BAD_REQUEST, "bad_request", message)


def _too_large(message: str) -> Refusal:
    status = HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE
    return Refusal(status, status.name.lower(), message)


class _Connection(h11.Connection):
    """h11's server side, with each head checked as sent before h11 reads it, and HTTP/1.0
    and 1.1 only. Keeps the refusal that ended it, and whether a request is arriving."""

    def __init__(self, limits: Limits) -> None:
        # h11's own bound is a backstop: a head over the limit is refused above first.
        super().__init__(h11.SERVER, max_incomplete_event_size=limits.head + 4)
        self.limits = limits
        self.refusal: Refusal | None = None
        #: A request has begun to arrive and has not arrived whole.
        self.partial = False

    def next_event(self) -> Any:
        buffered = b""
        try:
            if self.their_state is h11.IDLE:
                buffered = self.trailing_data[0]
                self.refusal = refusal_of_head(buffered, self.limits)
                if self.refusal is not None:
                    raise h11.RemoteProtocolError(self.refusal.message, self.refusal.status)
            event = super().next_event()
            if isinstance(event, h11.Request) and event.http_version not in (b"1.0", b"1.1"):
                # 0.9 would be answered without a status line, 2 and 3 are other protocols.
                version = event.http_version.decode("ascii")
                raise h11.RemoteProtocolError(
                    f"unsupported HTTP version {version!r}; this server speaks HTTP/1.1", 400
                )
        except h11.RemoteProtocolError as exc:
            if self.refusal is None:
                status = HTTPStatus(exc.error_status_hint)
                self.refusal = Refusal(status, status.name.lower(), str(exc))
            raise
        state = self.their_state
        self.partial = state is h11.SEND_BODY or (state is h11.IDLE and bool(buffered))
        return event


class GuardedProtocol(H11Protocol):
    """uvicorn's h11 protocol with the module's guards; `limits` set by a subclass."""

    limits: ClassVar[Limits]
    #: Whether a connection whose owner the platform cannot tell is served: on a Unix socket
    #: only its owner may open (0600), yes; on a TCP port anyone may reach, no.
    serve_unknown_owner: ClassVar[bool] = True
    #: Header fields of every refusal besides the server's own (a page's CSP).
    refusal_fields: ClassVar[tuple[tuple[bytes, bytes], ...]] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn: _Connection = _Connection(self.limits)
        #: When it began waiting for its current request (the longest waiting is cut first).
        self.waiting_since = time.monotonic()
        self._deadline: asyncio.TimerHandle | None = None
        self._stalled: asyncio.TimerHandle | None = None

    def refused(self, refusal: Refusal) -> tuple[bytes, bytes]:
        """A refusal's content type and body, in the server's error shape."""
        raise NotImplementedError

    def owner(self, transport: asyncio.Transport) -> int | None:
        """The uid of the process at the other end (None: the platform cannot tell), as the
        kernel recorded it for a Unix socket's peer."""
        return peer_uid(cast(Any, transport.get_extra_info("socket")))

    @property
    def waiting(self) -> bool:
        """Whether it waits for a request (idle, or one arriving) rather than has one in hand."""
        return self.cycle is None or self.cycle.response_complete or self.conn.partial

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        uid = self.owner(transport)
        if uid != os.getuid() and (uid is not None or not self.serve_unknown_owner):
            log.warning("refused a connection from another user", uid=uid)
            transport.abort()
            return
        # Nothing kept back past what the kernel holds: a client that stops reading is seen
        # at once (`pause_writing`), and cut if it does not read on within `idle`.
        transport.set_write_buffer_limits(high=0)
        self._make_room()
        # A burst's idle connections are counted once they have had their grace.
        self.loop.call_later(GRACE, self._make_room)
        # uvicorn times out only a kept-alive connection; a new one waits no longer.
        self.timeout_keep_alive_task = self.loop.call_later(
            self.limits.idle, self.timeout_keep_alive_handler
        )

    def _make_room(self) -> None:
        """While more than `limits.waiting` connections wait for a request, cut those that have
        waited longest: one with a request arriving at once, an idle one after its grace."""
        now = time.monotonic()
        waiting = [
            other
            for other in cast(set[GuardedProtocol], self.connections)
            if other.waiting and not other.transport.is_closing()
        ]
        over = len(waiting) - self.limits.waiting
        if over <= 0:
            return
        cut = [c for c in waiting if c.conn.partial or now - c.waiting_since >= GRACE]
        for other in sorted(cut, key=lambda c: c.waiting_since)[:over]:
            other.cut_for_room()

    def cut_for_room(self) -> None:
        """Cut to make room for a new connection; told so if a request of it was arriving."""
        if self.conn.partial:
            busy = "cut to make room for another connection; ask again in a moment"
            self.refuse(Refusal(HTTPStatus.SERVICE_UNAVAILABLE, "busy", busy))
        else:
            self.transport.abort()

    def handle_events(self) -> None:
        super().handle_events()
        # The request's one deadline runs from its first byte until it has arrived whole.
        arriving = self.conn.partial and not self.transport.is_closing()
        if arriving and self._deadline is None:
            self._deadline = self.loop.call_later(self.limits.request, self._too_slow)
        elif not arriving and self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        message = f"a request must arrive whole within {self.limits.request:g} s of its first byte"
        self.refuse(Refusal(HTTPStatus.REQUEST_TIMEOUT, "request_timeout", message))

    def send_400_response(self, msg: str) -> None:
        # What h11 refused (or `_Connection` for it), in the server's error shape.
        self.refuse(self.conn.refusal or _bad(msg))

    def refuse(self, refusal: Refusal) -> None:
        """Answer `refusal` and close, whatever state the exchange is in."""
        if self.transport.is_closing():
            return
        content_type, body = self.refused(refusal)
        head = [
            f"HTTP/1.1 {refusal.status.value} {refusal.status.phrase}\r\n".encode(),
            *(
                name + b": " + value + b"\r\n"
                for name, value in (*self.server_state.default_headers, *self.refusal_fields)
            ),
            b"Content-Type: " + content_type + b"\r\n",
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode(),
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()

    def eof_received(self) -> bool:  # type: ignore[override]  # asyncio's own says bool
        if self.conn.partial:
            # A request that can never arrive whole: h11 says so, answered as a refusal.
            self.conn.receive_data(b"")
            self.handle_events()
            return False
        if self.cycle is None or self.cycle.response_complete:
            return False
        # The client has sent all it will: its answer is still written, then the connection
        # closes. An answer that goes on (an event stream) is woken to end (`http.request`).
        self.cycle.keep_alive = False
        self.cycle.message_event.set()
        return True

    def on_response_complete(self) -> None:
        self.waiting_since = time.monotonic()
        super().on_response_complete()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stalled is None:
            self._stalled = self.loop.call_later(self.limits.idle, self._not_reading)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None

    def _not_reading(self) -> None:
        self._stalled = None
        log.debug("cut a client that does not read its answer")
        sock = self.transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # A reset, not a close: TCP would otherwise keep trying to deliver what is unread
            # to a window that stays shut, holding the connection open in the kernel.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._deadline, self._stalled):
            if timer is not None:
                timer.cancel()
        self._deadline = self._stalled = None
        super().connection_lost(exc)
