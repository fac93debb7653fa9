"""Where a vault's daemon listens, and how any client finds it and knows it is the right one.

Every vault has a socket of its own, so a work vault and a personal vault never answer for
each other. The default is `<runtime dir>/vaultd/<vault name>-<8 digits of its id>.sock`, where
the runtime directory is `$XDG_RUNTIME_DIR` or, when the variable is missing, the directory
systemd-logind makes for the user (`/run/user/UID`, if it is there and private); without
either, `vaultd.sock` in the data directory.

The caller's environment is not enough to find a daemon: MCP clients start `vaultd mcp` with
only HOME, LOGNAME, PATH, SHELL, TERM and USER, while systemd starts the daemon with
`XDG_RUNTIME_DIR` (or a config may name a socket a shell never computes). So the daemon also
writes `daemon.json` into its data directory, which every client computes from the config
alone: the socket it listens on, its pid and its vault. A client tries the configured socket
if there is one, else the recorded socket, else the default one.

Only what the user owns is trusted: `daemon.json` is read only from a data directory of the
user's (vaultd.trust), and only when the user's own process wrote it, and a client connects only
through directories no one else may change and to a server the user (or root) runs
(vaultd.api.client). A recorded daemon that is alive but stopped (SIGSTOP) is named at once,
not after a request times out.

Every answer from a daemon carries its vault's id (`Vaultd-Vault` header, and `vault`,
`vault_id` in `/v1/health`). A client made by `find_daemon` checks it on every answer: the
daemon of another vault is never used, and a configured socket that belongs to another vault
is a clear error.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vaultd.api.client import Client
from vaultd.errors import (
    DaemonStoppedError,
    StartupError,
    TrustError,
    VaultdError,
    VaultMismatchError,
)
from vaultd.layout import DAEMON_RECORD, SOCKET, vault_id, vault_slug
from vaultd.storage.lock import check_data_dir, holder_pid, stopped
from vaultd.trust import check_path

#: macOS's sun_path holds 104 bytes; Linux's 108. Stay portable.
MAX_SOCKET_PATH = 104
#: Vault names are cut to this many bytes in the default socket's name (the id keeps it unique).
SOCKET_NAME_BYTES = 40


def runtime_dir(env: Mapping[str, str]) -> Path | None:
    """The user's runtime directory: `$XDG_RUNTIME_DIR`, else logind's `/run/user/UID`."""
    value = env.get("XDG_RUNTIME_DIR", "")
    if value and os.path.isabs(value) and os.path.isdir(value):
        return Path(value)
    # What systemd-logind sets XDG_RUNTIME_DIR to: a client started without the variable
    # still finds the daemon's socket there. Only if it is this user's own, and private.
    candidate = Path(f"/run/user/{os.getuid()}")
    try:
        info = candidate.stat()
    except OSError:
        return None
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077:
        return candidate
    return None


def default_socket_path(vault: Path, data_dir: Path, env: Mapping[str, str]) -> Path:
    runtime = runtime_dir(env)
    if runtime is None:
        return data_dir / SOCKET
    return runtime / "vaultd" / f"{vault_slug(vault, name_bytes=SOCKET_NAME_BYTES)}.sock"


def socket_path(
    setting: str, env: Mapping[str, str], data_dir: Path, vault: Path | None = None
) -> Path:
    """The socket a daemon for `vault` listens on: `[server] socket`, else the default."""
    if setting:
        path = Path(setting).expanduser()
    elif vault is not None:
        path = default_socket_path(vault, data_dir, env)
    else:
        path = data_dir / SOCKET
    size = len(os.fsencode(path))
    if size >= MAX_SOCKET_PATH:
        raise StartupError(
            f"the socket path {path} is {size} bytes; Unix sockets allow fewer than "
            f"{MAX_SOCKET_PATH} on every platform. Set [server] socket to a shorter path."
        )
    return path


def sockets_dir(setting: str, env: Mapping[str, str]) -> Path | None:
    """Where the daemons' sockets live side by side: beside the configured one, else the
    runtime directory's `vaultd/` (None when there is no runtime directory)."""
    if setting:
        return Path(setting).expanduser().parent
    runtime = runtime_dir(env)
    return None if runtime is None else runtime / "vaultd"


# -- the daemon's record ----------------------------------------------------------------------


def write_record(data_dir: Path, socket: Path, vault: Path) -> None:
    """Say where this daemon listens (atomically; owner-only like the rest of the directory)."""
    record = {
        "socket": str(socket),
        "pid": os.getpid(),
        "vault": str(vault),
        "vault_id": vault_id(vault),
    }
    target = data_dir / DAEMON_RECORD
    temporary = target.with_name(f".{DAEMON_RECORD}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    os.replace(temporary, target)


def remove_record(data_dir: Path) -> None:
    """Remove the record, if it is still this process's (a newer daemon's is left alone)."""
    with contextlib.suppress(TrustError):
        record = read_record(data_dir)
        if record is not None and record.get("pid") == os.getpid():
            with contextlib.suppress(OSError):
                (data_dir / DAEMON_RECORD).unlink()


def read_record(data_dir: Path) -> dict[str, Any] | None:
    """The record in `data_dir`, or None when there is none (or it cannot be read).

    Raises TrustError when the data directory, or the record, is another user's or open to
    their writes: a record planted there would send every client to their server.
    """
    path = data_dir / DAEMON_RECORD
    check_data_dir(data_dir)
    check_path(
        path,
        "the daemon's record",
        f"Remove it (rm {path}); a running daemon writes it again when it next starts",
    )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# -- finding the daemon -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Candidate:
    path: Path
    #: "configured" ([server] socket), "recorded" (daemon.json) or "default".
    source: str


def candidates(
    setting: str, vault: Path, data_dir: Path, env: Mapping[str, str]
) -> list[Candidate]:
    """The sockets to try for `vault`, in order."""
    if setting:
        return [Candidate(socket_path(setting, env, data_dir, vault), "configured")]
    found: list[Candidate] = []
    record = read_record(data_dir)
    if record is not None and isinstance(record.get("socket"), str):
        found.append(Candidate(Path(record["socket"]), "recorded"))
    with contextlib.suppress(StartupError):
        default = socket_path("", env, data_dir, vault)
        if all(c.path != default for c in found):
            found.append(Candidate(default, "default"))
    return found


def find_daemon(
    setting: str, vault: Path, data_dir: Path, env: Mapping[str, str], *, timeout: float = 70.0
) -> Client | None:
    """A client for the daemon serving `vault`, or None when none answers.

    Raises VaultMismatchError when the configured socket is served by another vault's daemon
    (a discovered one is passed over instead: it is only a guess); TrustError when a socket,
    its directory or the record is not the user's; DaemonStoppedError when the daemon that
    owns the data directory is stopped (a request would only wait for the timeout).
    """
    halted = stopped_daemon(data_dir)
    if halted is not None:
        raise halted
    for candidate in candidates(setting, vault, data_dir, env):
        client = Client(candidate.path, timeout=timeout, vault_id=vault_id(vault), vault=vault)
        try:
            health = client.health()
        except VaultMismatchError:
            if candidate.source == "configured":
                raise
            continue
        except TrustError:
            raise
        except VaultdError:
            continue
        if health is not None:
            return client
    return None


def stopped_daemon(data_dir: Path) -> DaemonStoppedError | None:
    """The error for a recorded daemon that is alive but stopped, else None.

    Only when the record's pid is also the lock's holder: a record left by a daemon that died
    is stale, and its pid may be another process's by now.
    """
    with contextlib.suppress(TrustError):
        record = read_record(data_dir)
        pid = record.get("pid") if record is not None else None
        if isinstance(pid, int) and pid == holder_pid(data_dir):
            return stopped(pid, daemon=True)
    return None


def starting(data_dir: Path, pid: int | None) -> bool:
    """Whether the daemon `pid`, which holds the data directory's lock, is still starting: it
    has not written its record, which it does once its socket answers."""
    if pid is None:
        return False
    with contextlib.suppress(TrustError):
        record = read_record(data_dir)
        return record is None or record.get("pid") != pid
    return False


def looked_at(setting: str, vault: Path, data_dir: Path, env: Mapping[str, str]) -> list[str]:
    """The sockets `find_daemon` tries, for messages that say where nothing answered."""
    try:
        return [str(c.path) for c in candidates(setting, vault, data_dir, env)]
    except VaultdError as exc:
        return [str(exc)]
