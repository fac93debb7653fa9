"""The page's server: 127.0.0.1 only, a secret exchanged for a cookie, the daemon's read
operations (and reindex) passed through to its socket, nothing else.

Safe by construction, against a web page in the same browser and against another local user:

- Every connection's owner is asked of the kernel (vaultd.ui.owner) before a byte is read, and
  only the user's own processes are served, whatever address they come from (127.0.0.2,
  ::ffff:127.0.0.1 are anyone's); when the owner cannot be known the connection is refused.
  So another user can neither read a page nor spend the link's secret.
- The link holds a secret, handed to the browser in a file only the user can read
  (vaultd.ui.link), never on a command line. It is exchanged for a random cookie (HttpOnly,
  SameSite=Strict, Path=/, kept by the browser for SESSION_DAYS), as often as the user opens
  the file: a new browser, or the same one after a restart, gets in again while this server
  runs; a wrong secret changes nothing. Every other request needs the cookie. Both die with
  the server: a new `vaultd ui` makes new ones.
- Every request's Host must be this server's own address (127.0.0.1:PORT or localhost:PORT):
  a DNS-rebinding page's requests carry its own name. An Origin, when sent, must be this
  server's too, and a POST must carry one; `Sec-Fetch-Site: cross-site` is refused, but for
  the exchange itself, which the link file (a `file://` page) starts and no other site can.
- No CORS header is ever sent; every answer has a strict Content-Security-Policy (scripts and
  styles only from here, no inline script), `nosniff`, no referrer, no framing, no caching.
- Only the routes of read operations (export aside) and reindex reach the daemon.
- The secret and the cookie are never logged (requests are not logged at all).
- It stops with its terminal (SIGHUP, SIGINT, SIGTERM) or after `idle` seconds without a
  request or an open event stream.

uvicorn serves it as it serves the API (vaultd.api.asgi), on an event loop in a thread, each
connection held by the API's guards (vaultd.api.protocol) to the page's limits: its owner asked
before a byte is read, a deadline for a request's head and body, caps on both, a client that
does not read cut. The application below is plain ASGI for the API's reason: a handful of
routes, each answered in one or two messages. What blocks (the daemon's answers, a PDF page
drawn) runs in a pool of WORKERS threads; an event stream is relayed by a thread of its own
reading the daemon's stream, at most MAX_STREAMS at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import http.client
import json
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar, cast
from urllib.parse import parse_qs, unquote

from vaultd import isolation
from vaultd.api import asgi
from vaultd.api.asgi import Message, Receive, Send, Served
from vaultd.api.client import Client
from vaultd.api.operations import OPERATIONS
from vaultd.api.protocol import GuardedProtocol, Limits, Refusal
from vaultd.errors import (
    LeftOutError,
    NoteUnavailableError,
    QueryError,
    VaultdError,
    VaultPathError,
)
from vaultd.hints import command
from vaultd.pipeline.discover.rules import IgnoreRules
from vaultd.ui import files, views
from vaultd.ui.owner import socket_owner

COOKIE = "vaultd_ui"
#: Every answer's policy: nothing inline, nothing from elsewhere, no framing, no forms.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
#: The policy of a vault file's answer: an SVG opened by itself could run its script, so the
#: browser is told to sandbox it (images inside the page never run script anyway).
FILE_CSP = "default-src 'none'; style-src 'unsafe-inline'; sandbox"
#: Every answer's header fields, refusals' included.
COMMON = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
#: The longest body passed on (a search's or a reindex's JSON).
MAX_BODY = 65536
#: The page's files, by the name asked for, with their types.
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "index.html": "text/html; charset=utf-8",
}
#: The exchange's answer: on to the page, with the cookie just set.
EXCHANGED = (
    b'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
    b'<meta http-equiv="refresh" content="0;url=/"><title>vaultd</title></head>'
    b'<body><a href="/">Open the page</a></body></html>'
)
#: How long the browser keeps the cookie: a bookmark opens the page for as long as this server
#: runs, across browser restarts (the cookie is worthless once the server stops).
SESSION_DAYS = 30
#: Seconds without a request or an open stream after which the server stops (0: never).
IDLE = 3600.0
#: Threads for what blocks: the daemon's answers, vault files, PDF pages.
WORKERS = 8
#: Event streams relayed at once (a browser's tabs), each by a thread reading the daemon's.
MAX_STREAMS = 16
#: What one connection is held to (vaultd.api.protocol): a browser keeps a few connections
#: alive between requests, and a request arrives whole within seconds.
LIMITS = Limits(idle=10.0, request=10.0, head=16384, fields=100, body=MAX_BODY, waiting=64)
#: How long a stop waits for the answers in hand.
STOP_GRACE = 2.0


def _allowed() -> list[tuple[str, re.Pattern[str]]]:
    """(method, route) of each operation the page may reach: the reads but export, and reindex."""
    out: list[tuple[str, re.Pattern[str]]] = []
    for op in OPERATIONS:
        if (op.read_only and op.name != "export") or op.name == "reindex":
            pattern = re.escape(op.route).replace(re.escape("{path}"), "(?P<path>.+)")
            out.append((op.method, re.compile(pattern)))
    return out


ALLOWED = _allowed()


def allowed(method: str, path: str) -> bool:
    return any(m == method and p.fullmatch(path) for m, p in ALLOWED)


def _refusal_body(message: str) -> bytes:
    return json.dumps({"error": {"code": "refused", "message": message}}).encode()


class PageProtocol(GuardedProtocol):
    """The page's connections: the guards with the page's limits, refusing any connection
    whose owner the kernel does not name as this user."""

    limits = LIMITS
    serve_unknown_owner = False
    refusal_fields: ClassVar[tuple[tuple[bytes, bytes], ...]] = tuple(
        (name.encode(), value.encode()) for name, value in COMMON.items()
    )

    def owner(self, transport: asyncio.Transport) -> int | None:
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        if not peer or not local:
            return None
        # Looked up here at each call: a test stands in for the kernel's word.
        return socket_owner((peer[0], peer[1]), (local[0], local[1]))

    def refused(self, refusal: Refusal) -> tuple[bytes, bytes]:
        return b"application/json", _refusal_body(refusal.message)


class _Refused(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Page:
    """The ASGI application: the secret, the cookie, the checks of every request, and what
    each route answers (see the module)."""

    def __init__(
        self,
        daemon: Client,
        vault: Path,
        port: int,
        *,
        idle: float,
        on_exchange: Callable[[], None] | None,
        rules: IgnoreRules | None,
        max_pdf_bytes: int,
    ) -> None:
        self.daemon = daemon
        self.vault = vault
        #: The vault's ignore rules and the largest PDF drawn: what the daemon reads, the page
        #: may show (vaultd.ui.files).
        self.rules = rules
        self.max_pdf_bytes = max_pdf_bytes
        self.idle = idle
        #: Called at each exchange of the secret for the cookie.
        self.on_exchange = on_exchange
        #: The URL's secret: exchanged for the cookie as often as it is asked.
        self.secret = secrets.token_urlsafe(32)
        self._cookie = secrets.token_urlsafe(32)
        self.hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}
        self.last_used = time.monotonic()
        self.streams = 0
        self.stopping = asyncio.Event()
        self.work = ThreadPoolExecutor(WORKERS, thread_name_prefix="vaultd-ui")

    def touch(self) -> None:
        self.last_used = time.monotonic()

    def exchange(self, key: str) -> str | None:
        """The cookie for the link's secret; None for any other key (which changes nothing)."""
        if not hmac.compare_digest(key.encode(), self.secret.encode()):
            return None
        if self.on_exchange is not None:
            self.on_exchange()
        return self._cookie

    def has_cookie(self, header: str | None) -> bool:
        for part in (header or "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE and hmac.compare_digest(value, self._cookie):
                return True
        return False

    async def watch_idle(self, stop: Callable[[], None]) -> None:
        """Stop once idle for `idle` seconds."""
        while self.idle > 0:
            await asyncio.sleep(1.0)
            if not self.streams and time.monotonic() - self.last_used > self.idle:
                stop()
                return

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        self.touch()
        body = await asgi.body(receive)
        if body is None:
            return
        headers: dict[str, str] = {}
        for name, value in scope["headers"]:
            # The first of a repeated field, as the checks have always read it.
            headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
        try:
            await self._route(scope, headers, body, receive, send)
        except _Refused as refused:
            await self._send(
                send, refused.status, _refusal_body(refused.message), "application/json",
                {"Connection": "close"},
            )  # fmt: skip

    async def _route(
        self, scope: Message, headers: Mapping[str, str], body: bytes, receive: Receive, send: Send
    ) -> None:
        method: str = scope["method"]
        # The path as sent, percent-escapes and all: a vault file's name is unquoted once.
        path = scope["raw_path"].decode("latin-1")
        query = scope["query_string"].decode("latin-1")
        if method not in ("GET", "POST"):
            raise _Refused(HTTPStatus.METHOD_NOT_ALLOWED, "method not allowed")
        key = parse_qs(query).get("key") if method == "GET" and path == "/" else None
        self._check(method, headers, exchange=key is not None)
        if key is not None:
            await self._exchange(send, key[-1])
        elif not self.has_cookie(headers.get("cookie")):
            raise _Refused(
                HTTPStatus.FORBIDDEN,
                "open the page with the link file `vaultd ui` printed (open.html); this browser "
                "has not been let in by this run of it",
            )
        elif method == "GET" and path in ("/", "/index.html"):
            await self._asset(send, "index.html")
        elif method == "GET" and path.startswith("/static/"):
            await self._asset(send, path.removeprefix("/static/"))
        elif method == "GET" and path.startswith(("/file/", "/pdf-page/")):
            await self._vault_file(send, path, query)
        elif path.startswith("/api/") and allowed(method, path.removeprefix("/api")):
            target = path.removeprefix("/api") + (f"?{query}" if query else "")
            await self._proxy(send, receive, method, target, body if method == "POST" else None)
        else:
            raise _Refused(HTTPStatus.NOT_FOUND, "not here")

    def _check(self, method: str, headers: Mapping[str, str], *, exchange: bool) -> None:
        if headers.get("host") not in self.hosts:
            raise _Refused(HTTPStatus.MISDIRECTED_REQUEST, "wrong Host")
        origin = headers.get("origin")
        if origin is not None and origin not in {f"http://{h}" for h in self.hosts}:
            raise _Refused(HTTPStatus.FORBIDDEN, "cross-site request")
        if method == "POST" and origin is None:
            raise _Refused(HTTPStatus.FORBIDDEN, "a POST must say where it comes from (Origin)")
        # The link file is a file:// page, so the browser calls its navigation cross-site. The
        # exchange needs the secret, not the cookie: no other site can make one that works.
        if headers.get("sec-fetch-site") == "cross-site" and not exchange:
            raise _Refused(HTTPStatus.FORBIDDEN, "cross-site request")

    async def _send(
        self,
        send: Send,
        status: int,
        body: bytes,
        kind: str,
        fields: Mapping[str, str] | None = None,
    ) -> None:
        fields = {**COMMON, "Content-Type": kind, **(fields or {})}
        await asgi.send_whole(send, status, body, fields)

    async def _exchange(self, send: Send, key: str) -> None:
        cookie = self.exchange(key)
        if cookie is None:
            raise _Refused(
                HTTPStatus.FORBIDDEN,
                "this link is not the running `vaultd ui`'s: open the link file it printed",
            )
        # A page that moves on by itself, not a redirect: after the link file's cross-site
        # start, a redirect's next request is cross-site too and the browser would withhold
        # the SameSite=Strict cookie; a navigation this page starts is same-origin.
        age = SESSION_DAYS * 86400
        cookie_field = f"{COOKIE}={cookie}; HttpOnly; SameSite=Strict; Path=/; Max-Age={age}"
        await self._send(
            send, HTTPStatus.OK, EXCHANGED, "text/html; charset=utf-8", {"Set-Cookie": cookie_field}
        )

    async def _asset(self, send: Send, name: str) -> None:
        kind = ASSETS.get(name)
        if kind is None:
            raise _Refused(HTTPStatus.NOT_FOUND, "not here")
        data = resources.files("vaultd.ui").joinpath("static", name).read_bytes()
        if name == "index.html":
            data = data.replace(b"{{vault}}", _html(self.vault.name).encode())
            data = data.replace(b"{{socket}}", _html(str(self.daemon.path)).encode())
            data = data.replace(b"{{start}}", _html(command("run")).encode())
        await self._send(send, HTTPStatus.OK, data, kind)

    async def _vault_file(self, send: Send, path: str, query: str) -> None:
        """An image of the vault (`/file/PATH`) or a PDF's page as a picture
        (`/pdf-page/PATH?page=N`), as vaultd.ui.files allows."""
        if path.startswith("/file/"):
            name = unquote(path.removeprefix("/file/"))
            job = lambda: files.vault_file(self.vault, name, rules=self.rules)  # noqa: E731
        else:
            name = unquote(path.removeprefix("/pdf-page/"))
            asked = parse_qs(query).get("page", ["1"])[-1]
            page = int(asked) if asked.isdigit() else 0
            job = lambda: files.pdf_page(  # noqa: E731
                self.vault, name, page, rules=self.rules, max_bytes=self.max_pdf_bytes
            )
        try:
            served = await asyncio.get_running_loop().run_in_executor(self.work, job)
        except (VaultPathError, QueryError) as exc:
            raise _Refused(HTTPStatus.BAD_REQUEST, str(exc)) from exc
        except NoteUnavailableError as exc:
            raise _Refused(HTTPStatus.NOT_FOUND, str(exc)) from exc
        except LeftOutError as exc:
            raise _Refused(HTTPStatus.UNPROCESSABLE_ENTITY, str(exc)) from exc
        await self._send(
            send, HTTPStatus.OK, served.body, served.content_type,
            {"Content-Security-Policy": FILE_CSP},
        )  # fmt: skip

    async def _proxy(
        self, send: Send, receive: Receive, method: str, target: str, body: bytes | None
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            answer = await loop.run_in_executor(self.work, self.daemon.open, method, target, body)
        except VaultdError as exc:
            raise _Refused(HTTPStatus.BAD_GATEWAY, "the vault's daemon does not answer") from exc
        kind = answer.getheader("Content-Type", "application/json")
        if kind.startswith("text/event-stream"):
            await self._relay(answer, send, receive)
            return
        try:
            data = await loop.run_in_executor(self.work, _read, method, target, answer, kind)
        except (OSError, http.client.HTTPException) as exc:
            raise _Refused(HTTPStatus.BAD_GATEWAY, "the vault's daemon does not answer") from exc
        finally:
            answer.close()
        await self._send(send, answer.status, data, kind)

    async def _relay(self, answer: http.client.HTTPResponse, send: Send, receive: Receive) -> None:
        """An event stream passed on as it comes, until either side goes away or the server
        stops. A thread reads the daemon's stream (it wakes at least at each heartbeat)."""
        if self.streams >= MAX_STREAMS:
            answer.close()
            raise _Refused(HTTPStatus.SERVICE_UNAVAILABLE, f"{MAX_STREAMS} streams are open")
        self.streams += 1
        lines: asyncio.Queue[bytes] = asyncio.Queue()
        done = threading.Event()
        reader = threading.Thread(
            target=_read_lines,
            args=(answer, asyncio.get_running_loop(), lines, done),
            name="vaultd-ui-stream",
            daemon=True,
        )
        try:
            fields = {**COMMON, "Content-Type": "text/event-stream; charset=utf-8"}
            await send(asgi.start(answer.status, {**fields, "Connection": "close"}))
            reader.start()
            pumped = self._pump(lines, send)
            await asgi.unless_gone(pumped, receive, done_sending=True, stop=self.stopping)
            await send({"type": "http.response.body", "body": b""})
        finally:
            self.streams -= 1
            self.touch()
            done.set()
            if not reader.is_alive():
                answer.close()  # (a reader closes it itself once it sees `done`)

    async def _pump(self, lines: asyncio.Queue[bytes], send: Send) -> None:
        while line := await lines.get():
            await send({"type": "http.response.body", "body": line, "more_body": True})
            if line in (b"\n", b"\r\n"):
                self.touch()


def _read(method: str, target: str, answer: http.client.HTTPResponse, kind: str) -> bytes:
    """The daemon's answer whole, a JSON one dressed for the page (vaultd.ui.views)."""
    data = answer.read()
    if answer.status == HTTPStatus.OK and kind.startswith("application/json"):
        enriched = views.enrich(method, target, json.loads(data))
        data = json.dumps(enriched, ensure_ascii=False).encode()
    return data


def _read_lines(
    answer: http.client.HTTPResponse,
    loop: asyncio.AbstractEventLoop,
    lines: asyncio.Queue[bytes],
    done: threading.Event,
) -> None:
    """The daemon's stream, line by line onto `lines`, then b"" when it ends; closed once the
    relay is `done` (seen at the next line: the daemon's heartbeat bounds the wait)."""
    try:
        while not done.is_set() and (line := answer.readline()):
            loop.call_soon_threadsafe(lines.put_nowait, line)
    except (OSError, http.client.HTTPException):
        pass  # the daemon went away
    except RuntimeError:
        pass  # the page's loop has closed: nobody is waiting
    finally:
        answer.close()
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(lines.put_nowait, b"")


def _html(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


class UiServer:
    """The page served on 127.0.0.1:`port` (0: any free port), from `start` until `close`."""

    def __init__(
        self,
        daemon: Client,
        vault: Path,
        *,
        idle: float = IDLE,
        port: int = 0,
        on_exchange: Callable[[], None] | None = None,
        rules: IgnoreRules | None = None,
        max_pdf_bytes: int = files.MAX_FILE_BYTES,
    ) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.close()
            raise
        self.port: int = sock.getsockname()[1]
        self.page = Page(
            daemon, vault, self.port, idle=idle, on_exchange=on_exchange, rules=rules,
            max_pdf_bytes=max_pdf_bytes,
        )  # fmt: skip
        self._idle_watch: asyncio.Task[None] | None = None
        self._served = Served(
            cast(Any, self.page),
            PageProtocol,
            sock,
            name="vaultd-ui",
            grace=STOP_GRACE,
            on_loop=self._watch,
            on_stop=self.page.stopping.set,
        )
        #: Set once the page has stopped being served.
        self.stopped = self._served.stopped

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        self._idle_watch = loop.create_task(self.page.watch_idle(self.stop))

    @property
    def url(self) -> str:
        """The link (holds the secret: hand it over in a private file, never on a command
        line, never in a log)."""
        return f"http://127.0.0.1:{self.port}/?key={self.page.secret}"

    def start(self) -> None:
        self._served.start()

    def stop(self) -> None:
        """Ask it to stop, from any thread or a signal handler; returns at once."""
        self._served.stop()
        isolation.close_children()  # the worker drawing PDF pages, if one was started

    def close(self) -> None:
        """Stop, let the answers in hand finish (for at most STOP_GRACE and a little), close."""
        self.stop()
        self._served.close()
        self.page.work.shutdown(wait=False, cancel_futures=True)
