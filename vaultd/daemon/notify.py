"""The systemd notification protocol (sd_notify(3)): a datagram to $NOTIFY_SOCKET.

A few lines rather than a dependency: the protocol is one `sendto` of `KEY=VALUE` lines, and
doing it here keeps it testable against a real datagram socket.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping


class Notifier:
    """Sends state changes to the service manager; does nothing when not run under one."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        address = env.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):
            address = "\0" + address[1:]  # the abstract namespace
        self._address = address
        watchdog_usec = env.get("WATCHDOG_USEC", "")
        watchdog_pid = env.get("WATCHDOG_PID", "")
        mine = not watchdog_pid or watchdog_pid == str(os.getpid())
        #: Seconds between WATCHDOG=1 pings (half the manager's timeout), or None.
        self.watchdog_interval: float | None = (
            int(watchdog_usec) / 2e6 if watchdog_usec.isdigit() and mine else None
        )

    @property
    def enabled(self) -> bool:
        return bool(self._address)

    def send(self, *lines: str) -> bool:
        if not self._address:
            return False
        payload = "\n".join(lines).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(payload, self._address)
            return True
        except OSError:
            return False  # the manager went away; nothing useful to do about it

    def ready(self, status: str = "") -> None:
        self.send("READY=1", *([f"STATUS={status}"] if status else []))

    def held_up(self, status: str, seconds: float) -> None:
        """The start waits for something: say what, and push the start timeout out to
        `seconds` from now (EXTEND_TIMEOUT_USEC, systemd 236+; older ones ignore it)."""
        self.send(f"STATUS={status}", f"EXTEND_TIMEOUT_USEC={int(seconds * 1_000_000)}")

    def reloading(self) -> None:
        # MONOTONIC_USEC lets systemd tell this reload from a later one (systemd 253+).
        self.send("RELOADING=1", f"MONOTONIC_USEC={time.monotonic_ns() // 1000}")

    def stopping(self) -> None:
        self.send("STOPPING=1")

    def watchdog(self) -> None:
        self.send("WATCHDOG=1")

    def status(self, text: str) -> None:
        self.send(f"STATUS={text}")
