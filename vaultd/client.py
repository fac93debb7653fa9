"""A small client for the daemon's Unix-socket API (the CLI uses it; so can scripts)."""

from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path
from typing import Any

from vaultd.errors import VaultdError


class DaemonError(VaultdError):
    """Raised when the daemon answered with an error."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{message} ({code}, HTTP {status})")
        self.status = status
        self.code = code


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(str(self._path))
        except BaseException:
            sock.close()  # a refused connect (a stale socket) must not leak the descriptor
            raise
        self.sock = sock


class Client:
    def __init__(self, path: Path, timeout: float = 70.0) -> None:
        self.path = path
        self.timeout = timeout

    def reachable(self) -> bool:
        """Whether a daemon answers on the socket (a stale socket file does not count)."""
        if not self.path.exists():
            return False
        try:
            self.request("GET", "/v1/health", timeout=5.0)
        except (OSError, VaultdError):
            return False
        return True

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
        except OSError as exc:
            raise VaultdError(f"cannot talk to the daemon at {self.path}: {exc}") from exc
        finally:
            connection.close()
        try:
            decoded = json.loads(data) if data else {}
        except ValueError as exc:
            raise VaultdError(f"the daemon sent something that is not JSON: {exc}") from exc
        if response.status >= 400:
            error = decoded.get("error") if isinstance(decoded, dict) else None
            if not isinstance(error, dict):
                error = {}
            raise DaemonError(
                response.status, str(error.get("code", "error")), str(error.get("message", ""))
            )
        return decoded
