"""The socket check: who answers on the vault's socket (its daemon, another vault's, a stale
file, a process that does not answer, something else), and whether the socket and its
directory are safe from other users."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from vaultd.doctor.report import Check, Status, quoted
from vaultd.errors import DaemonError, VaultdError
from vaultd.hints import suggest

#: How long to wait for a daemon's answer before calling it unresponsive.
DAEMON_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class Answer:
    """Who is at the socket: nothing, a stale file, a vaultd daemon (answering, or answering
    with its own errors: "failing") or something else."""

    kind: Literal["absent", "stale", "silent", "daemon", "failing", "other"]
    health: Mapping[str, Any] = field(default_factory=dict)
    status: Mapping[str, Any] = field(default_factory=dict)
    error: str = ""


def ask_daemon(path: Path) -> Answer:
    """Who is at `path`, asked for its health and status within DAEMON_TIMEOUT."""
    from vaultd.api.client import Client
    from vaultd.api.operations import BY_NAME

    try:
        path.lstat()
    except OSError:
        return Answer("absent")
    client = Client(path, timeout=DAEMON_TIMEOUT)
    try:
        # As they came, unchecked by their models: what answers may be no vaultd at all.
        health = client.request(BY_NAME["health"].method, BY_NAME["health"].route)
        status = client.request(BY_NAME["status"].method, BY_NAME["status"].route)
    except DaemonError as exc:
        if exc.message and exc.code != "error":  # the client's code for a body without one
            # A vaultd error body: the daemon is there, and something behind it fails.
            return Answer("failing", error=exc.message)
        return Answer("other", error=str(exc))
    except VaultdError as exc:
        cause = exc.__cause__
        if isinstance(cause, ConnectionRefusedError | FileNotFoundError):
            return Answer("stale", error=str(exc))
        if isinstance(cause, TimeoutError):
            return Answer("silent", error=str(exc))
        return Answer("other", error=str(exc))
    if not isinstance(health, dict) or not isinstance(status, dict) or "vault" not in status:
        return Answer("other", error="the answer is not a vaultd status")
    return Answer("daemon", health=health, status=status)


def _dir_problem(directory: Path, data_dir: Path) -> tuple[Status, str, str] | None:
    """The daemon's own rule (refuse a foreign-owned or writable-by-others directory) plus a
    warning for a socket directory open beyond 0700. The data directory, the socket's home
    when there is no $XDG_RUNTIME_DIR, is created with the user's umask and is not warned
    about: the socket in it is 0600 and checks its peers' uid."""
    from vaultd.trust import distrust

    try:
        info = directory.lstat()
    except FileNotFoundError:
        info = None
    except OSError as exc:
        return "fail", f"cannot inspect the socket directory {directory}: {exc}", ""
    problem = distrust(directory)
    if problem is not None and not (problem.path == directory and problem.kind == "writable"):
        return (
            "fail",
            f"{problem.describe()}, on the way to the socket: another user could swap it; the "
            "daemon refuses to start and clients refuse to connect (exit 77)",
            "choose another [server] socket, in a directory of your own",
        )
    if info is None:
        return None
    mode = stat.S_IMODE(info.st_mode)
    if not stat.S_ISDIR(info.st_mode):
        return "fail", f"{directory} is not a directory", "choose another [server] socket"
    if info.st_uid != os.getuid():
        return (
            "fail",
            f"the socket directory {directory} belongs to uid {info.st_uid}, not to you "
            f"({os.getuid()}); the daemon refuses to start",
            "choose another [server] socket, in a directory of your own",
        )
    if mode & 0o022:
        return (
            "fail",
            f"the socket directory {directory} is writable by others (mode {mode:03o}); the "
            "daemon refuses to start",
            f"chmod 700 {quoted(directory)}",
        )
    if mode & 0o077 and directory != data_dir:
        return (
            "warn",
            f"the socket directory {directory} is open to others (mode {mode:03o}, not 700)",
            f"chmod 700 {quoted(directory)}",
        )
    return None


def check_socket(path: Path, answer: Answer, vault: Path | None, data_dir: Path) -> Check:
    """The socket at `path`: its directory and mode safe, its length allowed, and who answers
    on it (`answer`) this vault's daemon or nobody."""
    from vaultd.api.locate import MAX_SOCKET_PATH

    size = len(os.fsencode(path))
    problem = _dir_problem(path.parent, data_dir)
    if problem is not None and problem[0] == "fail":
        return Check("socket", *problem)
    try:
        info = path.lstat()
    except FileNotFoundError:
        info = None
    except OSError as exc:
        return Check("socket", "fail", f"cannot inspect {path}: {exc}", "")
    if info is not None:
        if not stat.S_ISSOCK(info.st_mode):
            return Check(
                "socket",
                "fail",
                f"{path} exists and is not a socket; the daemon refuses to start",
                f"remove it (rm {quoted(path)}) or choose another [server] socket",
            )
        mode = stat.S_IMODE(info.st_mode)
        if info.st_uid != os.getuid() or mode & 0o022:
            return Check(
                "socket",
                "fail",
                f"{path} is mode {mode:03o}, owner uid {info.st_uid}: others may connect",
                "restart the daemon: it creates its socket 0600",
            )
        if mode & 0o077:
            problem = problem or (
                "warn",
                f"{path} is mode {mode:03o}, not 600",
                "restart the daemon: it creates its socket 0600",
            )
    answered = _answer_problem(path, answer, vault)
    if answered is not None:
        return answered
    if problem is not None:
        return Check("socket", *problem)
    if answer.kind == "daemon":
        found = f"{path}: the daemon answers (health {answer.health.get('status', '?')})"
    elif path.parent.exists():
        found = f"{path}: no daemon listening; the directory is ready"
    elif path.parent == data_dir:
        found = f"{path}: no daemon; it goes in the data directory when one starts"
    else:
        found = f"{path}: no daemon; its directory is created 0700 when one starts"
    return Check("socket", "ok", f"{found} ({size} of {MAX_SOCKET_PATH - 1} bytes)")


def _answer_problem(path: Path, answer: Answer, vault: Path | None) -> Check | None:
    """What answers on the socket, when it is not the daemon of this vault answering: another
    vault's daemon, nobody, a process that does not answer, an error, something else."""
    if answer.kind == "daemon" and vault is not None and answer.status["vault"] != str(vault):
        return Check(
            "socket",
            "fail",
            f"the daemon on {path} serves {answer.status['vault']}, not {vault}",
            "give each vault its own [server] socket",
        )
    if answer.kind == "stale":
        return Check(
            "socket",
            "warn",
            f"{path} is stale: nobody listens on it",
            f"start the daemon (it replaces a stale socket), or remove it: rm {quoted(path)}",
        )
    if answer.kind == "silent":
        return Check(
            "socket",
            "fail",
            f"a process listens on {path} but does not answer within {DAEMON_TIMEOUT:.0f} s",
            "restart the daemon (systemctl --user restart vaultd, or stop and start "
            f"{suggest('run')})",
        )
    if answer.kind == "failing":
        return Check(
            "socket",
            "warn",
            f"the daemon on {path} answers, with an error: {answer.error}",
            "see the failing checks, and the daemon's log",
        )
    if answer.kind == "other":
        return Check(
            "socket",
            "fail",
            f"something on {path} does not answer like vaultd: {answer.error}",
            "stop whatever listens there, or choose another [server] socket",
        )
    return None


def who_answers(
    setting: str, vault: Path, data_dir: Path, env: Mapping[str, str]
) -> tuple[Check | None, Path | None, Answer]:
    """The socket check, the socket a client would use and who answers on it.

    The socket is the first candidate where a daemon answers, else where the daemon will
    listen (the configured or default one, not a stale record); None when none can be named.
    """
    from vaultd.api.locate import candidates, stopped_daemon
    from vaultd.errors import TrustError

    halted = stopped_daemon(data_dir)
    try:
        tried = candidates(setting, vault, data_dir, env)
    except TrustError as exc:
        return Check("socket", "fail", str(exc), ""), None, Answer("absent")
    except VaultdError as exc:
        check = Check("socket", "fail", str(exc), "set [server] socket to a shorter path")
        return check, None, Answer("absent")
    if halted is not None:
        # Asking would only wait for the timeout: a stopped process answers nothing.
        return (
            Check("socket", "fail", str(halted), f"kill -CONT {halted.pid}"),
            None,
            Answer("absent"),
        )
    answer = Answer("absent")
    sock = next((c.path for c in tried if c.source != "recorded"), None)
    sock = sock or (tried[0].path if tried else None)
    for candidate in tried:
        heard = ask_daemon(candidate.path)
        if heard.kind == "daemon":
            sock, answer = candidate.path, heard
            break
        if candidate.path == sock:
            answer = heard
    if sock is None:
        return None, None, answer
    return check_socket(sock, answer, vault, data_dir), sock, answer
