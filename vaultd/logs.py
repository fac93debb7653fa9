"""structlog set-up: readable lines on a terminal and in the journal, JSON lines for files.

Under systemd (JOURNAL_STREAM names the socket stderr is) every line starts with its syslog
priority, `<4>` for a warning, which journald takes off and files the line under, so that
`journalctl -p warning` shows exactly vaultd's warnings and errors. The line itself is text
without a timestamp there: journald stamps every line it receives. A terminal gets the same
text after an ISO 8601 time; a file or a pipe gets JSON (docs/operations.md shows each).

Fields follow one convention whatever the format: a moment is ISO 8601 in UTC with
milliseconds (`iso`), a measured duration is whole milliseconds in a field named `..._ms`
(`ms`), and an event that concerns notes names them (`notes`). JSON keeps those fields as they
are, for tools; the text a person reads (a terminal, the journal) shows each duration in the
unit that reads best past a second, under the field's name without `_ms` (`ms` itself reads
`took`): `took=9.7 min keyword=4.6 min`, not `ms=583029 keyword_ms=276176` (`readable`).

A log file rotates by size (keeping a few old files) so a daemon that runs for months never
fills the disk with its own log.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

import structlog

from vaultd.config import LogSection
from vaultd.errors import ConfigError
from vaultd.progress import write_around_bars

ROTATE_BYTES = 10 * 1024 * 1024
KEEP = 3

#: syslog's priorities, which journald files each line under (sd-daemon(3)).
PRIORITIES = {"debug": 7, "info": 6, "warning": 4, "error": 3, "critical": 2}

#: How many notes an event names before it only counts the rest.
NAMED = 5


def iso(epoch: float | None) -> str | None:
    """A moment as a person reads it: `2026-12-03T18:40:12.345Z`."""
    if epoch is None:
        return None
    moment = datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")
    return moment.replace("+00:00", "Z")


def ms(seconds: float | None) -> int | None:
    """A duration in whole milliseconds: finer is noise, coarser hides a short pass."""
    return None if seconds is None else round(seconds * 1000)


class _Shown(str):
    """Text a console line shows as it is, unquoted (`took=9.7 min`, not `took='9.7 min'`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


def readable(milliseconds: float) -> str:
    """A duration as a person reads it: `583 ms`, `12.3 s`, `9.7 min`, `1.6 h`."""
    if milliseconds < 1000:
        return f"{round(milliseconds)} ms"
    seconds = milliseconds / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _readable_durations(
    _: Any, __: str, event: structlog.types.EventDict
) -> structlog.types.EventDict:
    """For the console renderer: each `..._ms` field (and `ms`) as `readable` text."""
    if not any(key == "ms" or key.endswith("_ms") for key in event):
        return event
    shown: structlog.types.EventDict = {}
    for key, value in event.items():
        is_ms = key == "ms" or key.endswith("_ms")
        if is_ms and (value is None or type(value) in (int, float)):
            name = "took" if key == "ms" else key[:-3]
            shown[name] = None if value is None else _Shown(readable(value))
        else:
            shown[key] = value
    return shown


def notes(paths: Collection[str]) -> dict[str, Any]:
    """The fields that name the notes an event concerns: `path` for one; `paths` (the first
    few, sorted) and `more` (how many were left out) for several; nothing for none."""
    named = sorted(paths)
    if not named:
        return {}
    if len(named) == 1:
        return {"path": named[0]}
    fields: dict[str, Any] = {"paths": named[:NAMED]}
    if len(named) > NAMED:
        fields["more"] = len(named) - NAMED
    return fields


def journal_stream(stream: Any, env: Mapping[str, str] | None = None) -> bool:
    """Whether `stream` is connected to the journal.

    systemd connects a service's stderr to journald and puts that socket's `device:inode` in
    JOURNAL_STREAM; a child with another stderr (a redirect, a terminal) inherits the
    variable, so only a matching descriptor counts.
    """
    value = (os.environ if env is None else env).get("JOURNAL_STREAM", "")
    try:
        device, inode = (int(part) for part in value.split(":"))
        found = os.fstat(stream.fileno())
    except (ValueError, OSError, AttributeError):
        return False
    return (found.st_dev, found.st_ino) == (device, inode)


def for_stderr(text: str, level: str = "error") -> str:
    """`text` as lines for stderr outside the log (a command's fatal error): each with its
    priority when stderr is the journal, which would otherwise file them as info."""
    if not journal_stream(sys.stderr):
        return text
    return "\n".join(f"<{PRIORITIES[level]}>{line}" for line in text.split("\n"))


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


class _Terminal:
    """A terminal, written around the progress bar `vaultd index` may be drawing on it."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        write_around_bars(self._stream, text)
        return len(text)

    def flush(self) -> None:
        self._stream.flush()


def _timestamp(_: Any, __: str, event: structlog.types.EventDict) -> structlog.types.EventDict:
    event["timestamp"] = iso(datetime.now(UTC).timestamp())
    return event


class _Prioritized:
    """Puts the line's syslog priority before each of its lines (a traceback is several, and
    journald files each line on its own)."""

    def __init__(self, renderer: structlog.types.Processor) -> None:
        self._renderer = renderer

    def __call__(self, logger: Any, name: str, event: structlog.types.EventDict) -> str:
        prefix = f"<{PRIORITIES.get(str(event.get('level')), PRIORITIES['info'])}>"
        text = str(self._renderer(logger, name, event))
        return "\n".join(prefix + line for line in text.split("\n"))


class _Forward(logging.Handler):
    """The libraries' standard logging (chromadb, watchdog, onnxruntime: their warnings and
    errors) in vaultd's format, so that the journal files them by their level too."""

    def emit(self, record: logging.LogRecord) -> None:
        structlog.get_logger().log(record.levelno, record.getMessage(), logger=record.name)


def _uncaught(kind: type[BaseException], error: BaseException, trace: Any) -> None:
    """A crash's traceback as one critical event: each of its lines under the journal's
    priority for it, not filed as info."""
    structlog.get_logger().critical("uncaught exception", exc_info=(kind, error, trace))


_current_file: RotatingFile | None = None
_level = logging.INFO


def configure(
    section: LogSection, stream: TextIO | None = None, env: Mapping[str, str] | None = None
) -> None:
    """Apply a `[log]` section; raises ConfigError (changing nothing) if its file won't open."""
    global _current_file, _level
    level = getattr(logging, section.level.upper())
    out: Any = stream or sys.stderr
    new_file: RotatingFile | None = None
    if section.file:
        try:
            new_file = RotatingFile(os.path.expanduser(section.file))
        except OSError as exc:
            raise ConfigError(
                [f"[log] file: cannot open {section.file}: {exc.strerror or exc}"]
            ) from exc
        out = new_file
    journal = new_file is None and journal_stream(out, env)
    tty = out.isatty()
    fmt = section.format
    if fmt == "auto":
        fmt = "console" if tty or journal else "json"
    processors: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
    ]
    if fmt == "json" or not journal:  # journald stamps each line it receives
        processors.append(_timestamp)
    processors.append(structlog.processors.format_exc_info)
    if fmt == "console":
        processors.append(_readable_durations)
    renderer: structlog.types.Processor = (
        # In the order the call gives them: the note an event concerns comes first.
        structlog.dev.ConsoleRenderer(
            colors=tty and not journal, pad_event_to=0, sort_keys=False, pad_level=not journal
        )
        if fmt == "console"
        else structlog.processors.JSONRenderer()
    )
    processors.append(_Prioritized(renderer) if journal else renderer)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.WriteLoggerFactory(_Terminal(out) if tty else out),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    _level = level
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _Forward)]:
        root.removeHandler(handler)
    root.addHandler(_Forward(logging.WARNING))
    if journal:
        sys.excepthook = _uncaught
    elif sys.excepthook is _uncaught:
        sys.excepthook = sys.__excepthook__
    previous, _current_file = _current_file, new_file
    if previous is not None:
        previous.close()


def only_errors() -> None:
    """Keep the configured output but drop everything below an error (`vaultd index -q`)."""
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(max(_level, logging.ERROR))
    )
