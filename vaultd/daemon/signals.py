"""Signals for the daemon's main thread, and the wait that wakes on them.

The first SIGTERM or SIGINT asks for a graceful stop, a second SIGINT forces an immediate exit
(1), SIGHUP asks for a reload. Once a signal asked for the stop, that second SIGINT exits at once
until the process is gone: after the handlers' block the interpreter's exit still joins
threads, and Python's own handler would raise KeyboardInterrupt there, print a traceback and go
on waiting. A handler runs on the main thread between two bytecodes, possibly
while that thread holds a lock (an Event's condition, inside `wait`), and would wait for itself
for ever if it took one: so it only sets flags and writes a byte to a socket pair (open while
the handlers are installed), which wakes the main loop.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import FrameType


class Signals:
    """The stop and reload asked for, by a signal or by another thread."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._reload_asked = False
        self._stop_asked = False
        self._wake_read: socket.socket | None = None
        self._wake_write: socket.socket | None = None
        self._interrupts = 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            self._reload_asked = True
        else:
            if signum == signal.SIGINT:
                self._interrupts += 1
                if self._interrupts > 1:
                    _exit_now()
            self._stop_asked = True
        self._wake()

    def _wake(self) -> None:
        sock = self._wake_write
        if sock is not None:
            # Full: a wake-up is pending anyway. Closed: the handlers are gone too.
            with suppress(OSError):
                sock.send(b"!")

    def sleep(self, seconds: float) -> bool:
        """Wait up to `seconds` for a stop or a signal; True once a stop was asked for."""
        sock = self._wake_read
        if sock is None:  # no handlers installed (the loop run on its own, in tests)
            self._stop.wait(seconds)
        elif not self._stop.is_set() and not self._stop_asked:
            ready, _, _ = select.select([sock], [], [], seconds)
            if ready:
                with suppress(OSError):
                    sock.recv(4096)
        if self._stop_asked:
            self._stop.set()
        return self._stop.is_set()

    @contextmanager
    def installed(self) -> Iterator[None]:
        """The handlers of SIGTERM, SIGINT and SIGHUP, for the life of the block."""
        handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)
        previous = {s: signal.signal(s, self._on_signal) for s in handled}
        try:
            yield
        finally:
            for s, handler in previous.items():
                if s == signal.SIGINT and self._stop_asked:
                    signal.signal(s, _on_late_interrupt)
                else:
                    signal.signal(s, handler)
            wake_read, wake_write = self._wake_read, self._wake_write
            self._wake_read = self._wake_write = None
            wake_read.close()
            wake_write.close()

    def stop(self) -> None:
        """Ask the main loop to stop (from any thread, never from a handler)."""
        self._stop.set()
        self._wake()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def reload_asked(self) -> bool:
        """Whether a reload was asked for since the last call."""
        asked, self._reload_asked = self._reload_asked, False
        return asked


def _exit_now() -> None:
    os.write(2, b"vaultd: second interrupt, exiting now\n")
    os._exit(1)


def _on_late_interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGINT after a signal's stop, while the process ends: the second interrupt."""
    _exit_now()
