"""structlog set-up: readable lines on a terminal, JSON lines for services and files.

A log file rotates by size (keeping a few old files) so a daemon that runs for months never
fills the disk with its own log.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import TextIO

import structlog

from vaultd.config import LogSection
from vaultd.errors import ConfigError

ROTATE_BYTES = 10 * 1024 * 1024
KEEP = 3


class RotatingFile:
    """A line-buffered text file that moves itself to `.1` (`.2`, ...) past a size."""

    def __init__(self, path: str, max_bytes: int = ROTATE_BYTES, keep: int = KEEP) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self._lock = threading.Lock()
        self._handle = _open_private(path)

    def write(self, text: str) -> int:
        with self._lock:
            written = self._handle.write(text)
            if self._handle.tell() >= self.max_bytes:
                self._rotate()
            return written

    def flush(self) -> None:
        with self._lock:
            self._handle.flush()

    def isatty(self) -> bool:
        return False

    def close(self) -> None:
        with self._lock:
            self._handle.close()

    def _rotate(self) -> None:
        self._handle.close()
        for n in range(self.keep - 1, 0, -1):
            older = f"{self.path}.{n}"
            if os.path.exists(older):
                os.replace(older, f"{self.path}.{n + 1}")
        os.replace(self.path, f"{self.path}.1")
        self._handle = _open_private(self.path)


def _open_private(path: str) -> TextIO:
    """The log for appending, owner-only whatever the umask: it quotes note paths and errors."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o600)  # an older or hand-made file: take it back
        return open(fd, "a", encoding="utf-8", buffering=1)
    except BaseException:
        os.close(fd)
        raise


_current_file: RotatingFile | None = None


def configure(section: LogSection, stream: TextIO | None = None) -> None:
    """Apply a `[log]` section; raises ConfigError (changing nothing) if its file won't open."""
    global _current_file
    level = getattr(logging, section.level.upper())
    out: TextIO | RotatingFile = stream or sys.stderr
    new_file: RotatingFile | None = None
    if section.file:
        try:
            new_file = RotatingFile(os.path.expanduser(section.file))
        except OSError as exc:
            raise ConfigError(
                [f"[log] file: cannot open {section.file}: {exc.strerror or exc}"]
            ) from exc
        out = new_file
    fmt = section.format
    if fmt == "auto":
        fmt = "console" if out.isatty() else "json"
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer(colors=out.isatty())
        if fmt == "console"
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(out),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    previous, _current_file = _current_file, new_file
    if previous is not None:
        previous.close()
