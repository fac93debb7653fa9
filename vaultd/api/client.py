"""A small client for the daemon's Unix-socket API (the CLI uses it; so can scripts), and
`RemoteService`: the API's `Service` from another process, each operation one request.

Nothing is sent to a server that is not the user's: before a request the socket's path is
walked (vaultd.trust: no directory on the way another user owns or may write) and, once
connected, the kernel says who listens (SO_PEERCRED; LOCAL_PEERCRED on macOS and the BSDs);
a process of another user, which could answer forged hits, is refused before a byte goes out.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import struct
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlencode

from pydantic import BaseModel

from vaultd.api.operations import BY_NAME, HealthRequest, Operation, Request
from vaultd.errors import (
    DaemonError,
    NoteError,
    NoteNotIndexedError,
    NoteUnavailableError,
    NotReadyError,
    QueryError,
    TrustError,
    VaultdError,
    VaultMismatchError,
)
from vaultd.layout import vault_id
from vaultd.trust import check_path, user_name

#: Every answer names the vault its daemon serves (its id, see vaultd.layout.vault_id).
VAULT_HEADER = "Vaultd-Vault"
#: And its path, percent-encoded (headers are Latin-1; paths are not), for error messages.
VAULT_PATH_HEADER = "Vaultd-Vault-Path"


#: macOS's and the BSDs' getsockopt level and option for the peer's `struct xucred` (<sys/un.h>;
#: not every Python names them).
_SOL_LOCAL = getattr(socket, "SOL_LOCAL", 0)
_LOCAL_PEERCRED = getattr(socket, "LOCAL_PEERCRED", 1)
#: struct xucred: cr_version, cr_uid, cr_ngroups, cr_groups[16] (FreeBSD adds a pid after).
_XUCRED = "=IIh2x16I"


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a connected Unix socket, as the kernel
    recorded it at connect() or listen(); None where the platform cannot tell."""
    if hasattr(socket, "SO_PEERCRED"):  # Linux
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return int(struct.unpack("3i", creds)[1])
    if sys.platform == "darwin" or "bsd" in sys.platform:
        raw = sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERCRED, struct.calcsize(_XUCRED))
        return int(struct.unpack_from("=II", raw)[1])
    return None


def trusted_uid(uid: int) -> bool:
    """The user's own processes, or root's (a system service)."""
    return uid in (os.getuid(), 0)


_SOCKET_ADVICE = (
    "Set [server] socket to a path in a directory of your own (or unset it: the default is "
    "in your private runtime directory), and check $XDG_RUNTIME_DIR"
)


def check_socket(path: Path) -> None:
    """Refuse a socket in a directory (or below one) that another user owns or may write."""
    check_path(path.parent, "the socket's directory", _SOCKET_ADVICE)
    try:
        owner = path.lstat().st_uid
    except OSError:
        return  # nothing there: the connect says so
    if not trusted_uid(owner):
        raise TrustError(
            f"refusing the socket {path}: it belongs to {user_name(owner)}, not to you. "
            f"{_SOCKET_ADVICE}"
        )


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        check_socket(self._path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(str(self._path))
            uid = peer_uid(sock)
        except BaseException:
            sock.close()  # a refused connect (a stale socket) must not leak the descriptor
            raise
        if uid is not None and not trusted_uid(uid):
            sock.close()
            raise TrustError(
                f"refusing the server on {self._path}: it is run by {user_name(uid)}, not by "
                "you, and could answer anything; nothing was sent to it. Stop using that "
                f"socket and find out who put it there. {_SOCKET_ADVICE}"
            )
        self.sock = sock


class Client:
    """Requests to one daemon. With `vault_id`, every answer must come from that vault's
    daemon: one from another raises VaultMismatchError, whatever the request.

    With `vault` too (the vault's resolved path, whose id `vault_id` is), a daemon that serves
    another path is still this vault's when that path now leads here: a vault root swapped for
    a symlink while its daemon runs. The daemon says so itself (degraded, the root a symlink);
    refusing its answer would hide that behind a mismatch.
    """

    def __init__(
        self,
        path: Path,
        timeout: float = 70.0,
        vault_id: str | None = None,
        *,
        vault: Path | None = None,
    ) -> None:
        self.path = path
        self.timeout = timeout
        self.vault_id = vault_id
        self.vault = vault

    def reachable(self) -> bool:
        """Whether a daemon answers on the socket (a stale socket file does not count)."""
        try:
            return self.health() is not None
        except VaultMismatchError:
            return False
        except VaultdError:
            return False

    def health(self, timeout: float = 5.0) -> dict[str, Any] | None:
        """The daemon's `/v1/health`, or None when nothing answers on the socket.

        Raises VaultMismatchError when it serves another vault than `vault_id`, TrustError
        when the socket or its server is not the user's.
        """
        if not self.path.exists():
            return None
        op = BY_NAME["health"]
        try:
            found = self.request(op.method, op.route, timeout=timeout)
        except (VaultMismatchError, TrustError):
            raise
        except VaultdError:
            return None
        return found if isinstance(found, dict) else None

    def request(
        self, method: str, target: str, body: Any = None, *, timeout: float | None = None
    ) -> Any:
        connection = _UnixConnection(self.path, timeout or self.timeout)
        try:
            payload = None if body is None else json.dumps(body).encode()
            headers = {"Content-Type": "application/json"} if payload is not None else {}
            connection.request(method, target, body=payload, headers=headers)
            response = connection.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise VaultdError(f"cannot talk to the daemon at {self.path}: {exc}") from exc
        finally:
            connection.close()
        self._check_vault(response)
        try:
            decoded = json.loads(data) if data else {}
        except ValueError as exc:
            raise VaultdError(f"the daemon sent something that is not JSON: {exc}") from exc
        if response.status >= 400:
            self._raise_for(response.status, data)
        return decoded

    def open(
        self, method: str, target: str, body: bytes | None = None, *, timeout: float | None = None
    ) -> http.client.HTTPResponse:
        """A request whose answer is read as it comes (a proxy's, an event stream's): the
        answer from this vault's daemon, whatever its status; closing it ends the connection."""
        connection = _UnixConnection(self.path, timeout or self.timeout)
        try:
            # One request per connection: the answer owns the socket, closed with it.
            headers = {"Connection": "close"}
            if body is not None:
                headers["Content-Type"] = "application/json"
            connection.request(method, target, body=body, headers=headers)
            response = connection.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise VaultdError(f"cannot talk to the daemon at {self.path}: {exc}") from exc
        try:
            self._check_vault(response)
        except VaultMismatchError:
            connection.close()
            raise
        return response

    def lines(self, target: str, *, timeout: float | None = None) -> Iterator[Any]:
        """A GET answered with JSON lines (`/v1/export`), one decoded item at a time."""
        connection = _UnixConnection(self.path, timeout or self.timeout)
        try:
            try:
                connection.request("GET", target)
                response = connection.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                raise VaultdError(f"cannot talk to the daemon at {self.path}: {exc}") from exc
            self._check_vault(response)
            if response.status >= 400:
                self._raise_for(response.status, response.read())
            while True:
                try:
                    line = response.readline()
                except (OSError, http.client.HTTPException) as exc:
                    raise VaultdError(f"the daemon's answer broke off: {exc}") from exc
                if not line:
                    return
                yield json.loads(line)
        finally:
            connection.close()

    def _raise_for(self, status: int, data: bytes) -> None:
        try:
            decoded = json.loads(data) if data else {}
        except ValueError:
            decoded = {}
        error = decoded.get("error") if isinstance(decoded, dict) else None
        if not isinstance(error, dict):
            error = {}
        kind, field = error.get("kind"), error.get("field")
        raise DaemonError(
            status,
            str(error.get("code", "error")),
            str(error.get("message", "")),
            kind if isinstance(kind, str) else None,
            field if isinstance(field, str) else None,
        )

    def _check_vault(self, response: http.client.HTTPResponse) -> None:
        """Raise VaultMismatchError unless the answer comes from this vault's daemon."""
        served = response.getheader(VAULT_HEADER)
        if self.vault_id is None or served == self.vault_id:
            return
        quoted_path = response.getheader(VAULT_PATH_HEADER)
        if served is not None and quoted_path and self.vault is not None:
            named = Path(unquote(quoted_path))
            # The id is of the path the daemon serves; a forged path would not hash to it.
            if vault_id(named) == served and _leads_to(named, self.vault):
                return
        raise VaultMismatchError(self._mismatch(served, quoted_path))

    def _mismatch(self, served: str | None, quoted_path: str | None) -> str:
        if served is None:
            return (
                f"the daemon on {self.path} does not say which vault it serves (an older "
                "vaultd, or not vaultd at all); restart it with this vaultd"
            )
        vault = unquote(quoted_path) if quoted_path else "another vault"
        return (
            f"the daemon on {self.path} serves {vault}, not this vault; give each vault its own "
            "[server] socket (or leave it unset: the default socket is per vault)"
        )


def _leads_to(path: Path, vault: Path) -> bool:
    """Whether `path`, resolved now, is `vault`."""
    try:
        return path.resolve(strict=True) == vault
    except (OSError, RuntimeError):
        return False


#: What a daemon's refusal was when it was raised there (vaultd.api.service): raised here again
#: as the same kind, with the same message, so a command fails alike with or without a daemon.
_REFUSED: dict[tuple[int, str], type[VaultdError]] = {
    (400, "bad_request"): QueryError,
    (400, "bad_json"): QueryError,
    (400, "bad_range"): QueryError,
    (404, "not_found"): NoteUnavailableError,
    (422, "unreadable"): NoteError,
    (503, "not_ready"): NotReadyError,
}


def refused(error: DaemonError) -> VaultdError:
    """The error a daemon's refusal stands for (vaultd.api.service lists them), its message as
    the daemon worded it; any other error answer as it came."""
    kind = _REFUSED.get((error.status, error.code))
    if kind is None:
        return error
    if kind is QueryError:
        return QueryError(error.message, error.field)
    if kind is NoteUnavailableError and error.kind == "not_indexed":
        kind = NoteNotIndexedError
    again = kind.__new__(kind)  # not its __init__: the message is whole already
    VaultdError.__init__(again, error.message)
    if isinstance(again, NoteUnavailableError):
        again.path, again.reason, again.kind = "", error.message, error.kind or "missing"
    return again


def wire(request: Request, route: str, method: str) -> tuple[str, dict[str, Any] | None]:
    """A request model as its operation's request: the target (the note's path in the route,
    a GET's fields as query parameters, a list's items repeated) and a POST's JSON body. Only
    the fields that differ from their defaults are sent."""
    fields = request.model_dump(mode="json", exclude_defaults=True)
    path = fields.pop("path", None)
    target = route.replace("{path}", quote(path)) if path is not None else route
    if method == "POST":
        return target, fields
    params = [
        (name, _param(item))
        for name, value in fields.items()
        for item in (value if isinstance(value, list) else [value])
    ]
    return target + (f"?{urlencode(params)}" if params else ""), None


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class RemoteService:
    """`vaultd.api.service.Service` answered by a running daemon: each operation is one request
    (its route and method from vaultd.api.operations), each answer checked by its model, so
    `RemoteService(client).search(request)` is a SearchResponse. What the daemon refuses is
    raised as the error it raised there (see `refused`)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @property
    def vault(self) -> Path:
        return Path(self.health(HealthRequest()).vault)

    @property
    def data_dir(self) -> Path:
        return Path(self.health(HealthRequest()).data_dir)

    def __getattr__(self, name: str) -> Callable[[Request], Any]:
        if name not in BY_NAME:
            raise AttributeError(name)
        op = BY_NAME[name]
        return lambda request: self._lines(op, request) if op.stream else self._call(op, request)

    def _call(self, op: Operation, request: Request) -> BaseModel:
        target, body = wire(request, op.route, op.method)
        try:
            found = self.client.request(op.method, target, body)
        except DaemonError as exc:
            raise refused(exc) from None
        return op.response.model_validate(found)

    def _lines(self, op: Operation, request: Request) -> Iterator[BaseModel]:
        target, _ = wire(request, op.route, op.method)
        try:
            for line in self.client.lines(target):
                yield op.response.model_validate(line)
        except DaemonError as exc:
            raise refused(exc) from None
