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
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from vaultd import isolation
from vaultd.api.client import Client
from vaultd.api.operations import OPERATIONS
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


class UiServer(ThreadingHTTPServer):
    daemon_threads = True

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
        super().__init__(("127.0.0.1", port), Handler)
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
        self._secret = secrets.token_urlsafe(32)
        self._cookie = secrets.token_urlsafe(32)
        self._lock = threading.Lock()
        self.last_used = time.monotonic()
        self.streams = 0
        self.port = self.server_address[1]
        self.hosts = {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}
        self.stopped = threading.Event()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A search the page cancelled (the next keystroke's replaced it) closes its connection
        # before the answer is written: not an error. Anything else is printed as usual.
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        """The link (holds the secret: hand it over in a private file, never on a command
        line, never in a log)."""
        return f"http://127.0.0.1:{self.port}/?key={self._secret}"

    def verify_request(self, request: Any, client_address: Any) -> bool:
        """Serve a connection only if the kernel says the user's own process made it: every
        source address is checked, and an owner that cannot be known is refused."""
        try:
            local = request.getsockname()
        except OSError:
            return False
        return socket_owner(client_address, local) == os.getuid()

    def exchange(self, key: str) -> str | None:
        """The cookie for the link's secret; None for any other key (which changes nothing)."""
        if not hmac.compare_digest(key.encode(), self._secret.encode()):
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

    def opened(self, change: int) -> None:
        with self._lock:
            self.streams += change
            self.last_used = time.monotonic()

    def touch(self) -> None:
        self.last_used = time.monotonic()

    def watch_idle(self) -> None:
        """Stop once idle for `idle` seconds (run on a thread of its own)."""
        while not self.stopped.wait(1.0):
            if self.idle > 0 and not self.streams and time.monotonic() - self.last_used > self.idle:
                self.stop()
                return

    def stop(self) -> None:
        if not self.stopped.is_set():
            self.stopped.set()
            threading.Thread(target=self.shutdown, daemon=True).start()
            isolation.close_children()  # the worker drawing PDF pages, if one was started


class Handler(BaseHTTPRequestHandler):
    server: UiServer
    protocol_version = "HTTP/1.1"
    server_version = "vaultd-ui"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a request line may hold the secret: nothing is logged

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_HEAD(self) -> None:
        self._refuse(HTTPStatus.METHOD_NOT_ALLOWED, "method not allowed")

    do_PUT = do_DELETE = do_OPTIONS = do_PATCH = do_HEAD

    def _handle(self, method: str) -> None:
        self.server.touch()
        url = urlsplit(self.path)
        key = parse_qs(url.query).get("key") if method == "GET" and url.path == "/" else None
        refusal = self._refusal(method, exchange=key is not None)
        if refusal is not None:
            self._refuse(*refusal)
            return
        if key is not None:
            self._exchange(key[-1])
            return
        if not self.server.has_cookie(self.headers.get("Cookie")):
            self._refuse(
                HTTPStatus.FORBIDDEN,
                "open the page with the link file `vaultd ui` printed (open.html); this browser "
                "has not been let in by this run of it",
            )
            return
        if method == "GET" and url.path in ("/", "/index.html"):
            self._asset("index.html")
        elif method == "GET" and url.path.startswith("/static/"):
            self._asset(url.path.removeprefix("/static/"))
        elif method == "GET" and url.path.startswith(("/file/", "/pdf-page/")):
            self._vault_file(url.path, url.query)
        elif url.path.startswith("/api/") and allowed(method, url.path.removeprefix("/api")):
            self._proxy(method, self.path.removeprefix("/api"))
        else:
            self._refuse(HTTPStatus.NOT_FOUND, "not here")

    def _refusal(self, method: str, *, exchange: bool) -> tuple[HTTPStatus, str] | None:
        if self.headers.get("Host") not in self.server.hosts:
            return HTTPStatus.MISDIRECTED_REQUEST, "wrong Host"
        origin = self.headers.get("Origin")
        if origin is not None and origin not in {f"http://{h}" for h in self.server.hosts}:
            return HTTPStatus.FORBIDDEN, "cross-site request"
        if method == "POST" and origin is None:
            return HTTPStatus.FORBIDDEN, "a POST must say where it comes from (Origin)"
        # The link file is a file:// page, so the browser calls its navigation cross-site. The
        # exchange needs the secret, not the cookie: no other site can make one that works.
        if self.headers.get("Sec-Fetch-Site") == "cross-site" and not exchange:
            return HTTPStatus.FORBIDDEN, "cross-site request"
        return None

    def _common_headers(self) -> None:
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Cache-Control", "no-store")

    def _send(self, status: HTTPStatus, body: bytes, kind: str, **headers: str) -> None:
        self.send_response(status)
        self._common_headers()
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)

    def _refuse(self, status: HTTPStatus, message: str) -> None:
        self.close_connection = True
        body = json.dumps({"error": {"code": "refused", "message": message}}).encode()
        with contextlib.suppress(OSError):
            self._send(status, body, "application/json", Connection="close")

    def _exchange(self, key: str) -> None:
        cookie = self.server.exchange(key)
        if cookie is None:
            self._refuse(
                HTTPStatus.FORBIDDEN,
                "this link is not the running `vaultd ui`'s: open the link file it printed",
            )
            return
        # A page that moves on by itself, not a redirect: after the link file's cross-site
        # start, a redirect's next request is cross-site too and the browser would withhold
        # the SameSite=Strict cookie; a navigation this page starts is same-origin.
        self._send(
            HTTPStatus.OK,
            EXCHANGED,
            "text/html; charset=utf-8",
            Set_Cookie=(
                f"{COOKIE}={cookie}; HttpOnly; SameSite=Strict; Path=/; "
                f"Max-Age={SESSION_DAYS * 86400}"
            ),
        )

    def _asset(self, name: str) -> None:
        kind = ASSETS.get(name)
        if kind is None:
            self._refuse(HTTPStatus.NOT_FOUND, "not here")
            return
        data = resources.files("vaultd.ui").joinpath("static", name).read_bytes()
        if name == "index.html":
            data = data.replace(b"{{vault}}", _html(self.server.vault.name).encode())
            data = data.replace(b"{{socket}}", _html(str(self.server.daemon.path)).encode())
            data = data.replace(b"{{start}}", _html(command("run")).encode())
        self._send(HTTPStatus.OK, data, kind)

    def _vault_file(self, path: str, query: str) -> None:
        """An image of the vault (`/file/PATH`) or a PDF's page as a picture
        (`/pdf-page/PATH?page=N`), as vaultd.ui.files allows."""
        server = self.server
        try:
            if path.startswith("/file/"):
                served = files.vault_file(
                    server.vault, unquote(path.removeprefix("/file/")), rules=server.rules
                )
            else:
                page = parse_qs(query).get("page", ["1"])[-1]
                served = files.pdf_page(
                    server.vault,
                    unquote(path.removeprefix("/pdf-page/")),
                    int(page) if page.isdigit() else 0,
                    rules=server.rules,
                    max_bytes=server.max_pdf_bytes,
                )
        except (VaultPathError, QueryError) as exc:
            self._refuse(HTTPStatus.BAD_REQUEST, str(exc))
            return
        except NoteUnavailableError as exc:
            self._refuse(HTTPStatus.NOT_FOUND, str(exc))
            return
        except LeftOutError as exc:
            self._refuse(HTTPStatus.UNPROCESSABLE_ENTITY, str(exc))
            return
        self._send(
            HTTPStatus.OK, served.body, served.content_type, Content_Security_Policy=FILE_CSP
        )

    def _proxy(self, method: str, target: str) -> None:
        body = None
        if method == "POST":
            try:
                length = int(self.headers.get("Content-Length") or "0")
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_BODY:
                self._refuse(HTTPStatus.BAD_REQUEST, "bad Content-Length")
                return
            body = self.rfile.read(length)
        try:
            answer = self.server.daemon.open(method, target, body)
        except VaultdError:
            self._refuse(HTTPStatus.BAD_GATEWAY, "the vault's daemon does not answer")
            return
        try:
            kind = answer.getheader("Content-Type", "application/json")
            if kind.startswith("text/event-stream"):
                self._relay(answer.status, answer)
                return
            data = answer.read()
            if answer.status == HTTPStatus.OK and kind.startswith("application/json"):
                data = json.dumps(
                    views.enrich(method, target, json.loads(data)), ensure_ascii=False
                ).encode()
            self._send(HTTPStatus(answer.status), data, kind)
        finally:
            answer.close()

    def _relay(self, status: int, answer: Any) -> None:
        """An event stream passed on as it comes, until either side goes away."""
        self.close_connection = True
        self.server.opened(1)
        try:
            self.send_response(status)
            self._common_headers()
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.flush()
            while line := answer.readline():
                self.wfile.write(line)
                if line in (b"\n", b"\r\n"):
                    self.wfile.flush()
                    self.server.touch()
        except OSError:
            pass
        finally:
            self.server.opened(-1)


def _html(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def serve(
    daemon: Client,
    vault: Path,
    *,
    idle: float = IDLE,
    port: int = 0,
    on_exchange: Callable[[], None] | None = None,
    rules: IgnoreRules | None = None,
    max_pdf_bytes: int = files.MAX_FILE_BYTES,
) -> UiServer:
    """A started server (serving on a thread of its own, its idle watch on another)."""
    server = UiServer(
        daemon, vault, idle=idle, port=port, on_exchange=on_exchange, rules=rules,
        max_pdf_bytes=max_pdf_bytes,
    )  # fmt: skip
    threading.Thread(target=server.serve_forever, name="vaultd-ui", daemon=True).start()
    threading.Thread(target=server.watch_idle, name="vaultd-ui-idle", daemon=True).start()
    return server
