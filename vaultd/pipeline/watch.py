"""watchdog events become settled, vault-relative paths.

Events are coalesced per path and released only after the path has been quiet for the settle
time, so an atomic save (temp file + rename), vim's rename-and-write or a sync tool's burst
become one update. Directory events become subtree rescans: a folder moved in, out or renamed
is handled by comparing that subtree with the manifest, which also makes a folder moved out a
delete and a move into `.trash/` a delete.

Lost events (the kernel's queue overflowed, our own pending set overflowed, the observer died)
are reported as a request for a full reconcile, never silently dropped.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

Backend = Literal["auto", "native", "polling"]
#: More pending paths than this and a full reconcile is cheaper than tracking them.
MAX_PENDING = 20_000
POLL_INTERVAL = 2.0


@dataclass(slots=True)
class Settled:
    """What the watcher hands the indexer: paths and subtrees to compare with the manifest."""

    paths: set[str] = field(default_factory=set)
    dirs: set[str] = field(default_factory=set)
    #: Events were lost: only a full reconcile is safe.
    full: bool = False
    #: The oldest event time (time.monotonic) among these, for save-to-searchable lag.
    first_event: float = 0.0

    def __bool__(self) -> bool:
        return bool(self.paths or self.dirs or self.full)


class _OverflowSpy(logging.Handler):
    """watchdog reports a kernel queue overflow only in a log record; listen for it."""

    def __init__(self, on_overflow: Callable[[], None]) -> None:
        super().__init__(logging.WARNING)
        self._on_overflow = on_overflow

    def emit(self, record: logging.LogRecord) -> None:
        if "overflow" in record.getMessage().lower():
            self._on_overflow()


class Watcher(FileSystemEventHandler):
    """Watches one vault recursively and coalesces its events."""

    def __init__(
        self,
        root: Path,
        *,
        settle: float,
        backend: Backend = "auto",
        is_ignored: Callable[[str, bool], bool] | None = None,
    ) -> None:
        self.root = root
        self.settle = settle
        self.backend = backend
        self._is_ignored = is_ignored or (lambda path, is_dir: False)
        self._lock = threading.Lock()
        self._pending: dict[str, float] = {}
        self._pending_dirs: dict[str, float] = {}
        self._full = False
        self._first_event = 0.0
        self._observer: BaseObserver | None = None
        #: "native", "polling", or "" when not running; shown in status.
        self.mode = ""
        self.fallback_reason = ""
        self._spy = _OverflowSpy(self.request_full)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start observing; falls back to polling when native watches cannot be set up."""
        logging.getLogger("watchdog.observers.inotify_c").addHandler(self._spy)
        logging.getLogger("watchdog.observers.inotify").addHandler(self._spy)
        if self.backend in ("auto", "native"):
            try:
                self._start(Observer(), "native")
                return
            except OSError as exc:
                if self.backend == "native":
                    raise
                self.fallback_reason = _explain(exc)
        self._start(PollingObserver(timeout=POLL_INTERVAL), "polling")

    def _start(self, observer: BaseObserver, mode: str) -> None:
        observer.schedule(self, str(self.root), recursive=True)
        observer.daemon = True
        observer.start()
        self._observer = observer
        self.mode = mode

    def stop(self) -> None:
        observer, self._observer = self._observer, None
        self.mode = ""
        if observer is not None:
            observer.stop()
            if observer.is_alive():
                observer.join(timeout=5)
        logging.getLogger("watchdog.observers.inotify_c").removeHandler(self._spy)
        logging.getLogger("watchdog.observers.inotify").removeHandler(self._spy)

    def alive(self) -> bool:
        return self._observer is not None and self._observer.is_alive()

    # -- events --------------------------------------------------------------------------------

    def request_full(self) -> None:
        with self._lock:
            self._full = True
            self._pending.clear()
            self._pending_dirs.clear()
            if not self._first_event:
                self._first_event = time.monotonic()

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        if event.is_directory and event.event_type not in ("created", "deleted", "moved"):
            # A folder is "modified" whenever a file in it changes; the file's own event says
            # which. Treating it as a subtree to rescan would walk the folder on every save.
            return
        now = time.monotonic()
        paths = [event.src_path]
        dest = getattr(event, "dest_path", "")
        if dest:
            paths.append(dest)
        for raw in paths:
            rel = self._relative(raw)
            if rel is None:
                continue
            if rel == "":
                # The root itself was deleted or moved: the service checks the root and
                # re-arms; everything it held is compared again when it returns.
                if event.event_type in ("deleted", "moved"):
                    self.request_full()
                continue
            if event.is_directory:
                if not self._is_ignored(rel, True) or raw == event.src_path:
                    self._note(self._pending_dirs, rel, now)
            elif rel.lower().endswith(".md"):
                # A move's source is always considered: it may be a known note leaving.
                leaving = raw == event.src_path and event.event_type == "moved"
                if leaving or not self._is_ignored(rel, False):
                    self._note(self._pending, rel, now)

    def _note(self, table: dict[str, float], rel: str, now: float) -> None:
        with self._lock:
            if self._full:
                return
            table[rel] = now
            if not self._first_event:
                self._first_event = now
            if len(self._pending) + len(self._pending_dirs) > MAX_PENDING:
                self._full = True
                self._pending.clear()
                self._pending_dirs.clear()

    def _relative(self, raw: bytes | str) -> str | None:
        path = os.fsdecode(raw)
        root = str(self.root)
        if path == root:
            return ""
        if not path.startswith(root + os.sep):
            return None
        rel = path[len(root) + 1 :].replace(os.sep, "/")
        return unicodedata.normalize("NFC", rel)

    # -- handing over --------------------------------------------------------------------------

    def pending(self) -> int:
        with self._lock:
            return len(self._pending) + len(self._pending_dirs) + (1 if self._full else 0)

    def take(self, *, force: bool = False) -> Settled:
        """Paths quiet for the settle time (all of them with `force`), removed from pending."""
        now = time.monotonic()
        cutoff = now if force else now - self.settle
        with self._lock:
            out = Settled(full=self._full, first_event=self._first_event)
            if self._full:
                self._full = False
                self._first_event = 0.0
                return out
            for table, target in ((self._pending, out.paths), (self._pending_dirs, out.dirs)):
                for rel, seen in list(table.items()):
                    if seen <= cutoff:
                        target.add(rel)
                        del table[rel]
            if out:
                # Everything older than what remains has been handed over.
                remaining = list(self._pending.values()) + list(self._pending_dirs.values())
                self._first_event = min(remaining) if remaining else 0.0
            return out

    def next_due(self) -> float | None:
        """Seconds until the oldest pending path settles, or None when nothing is pending."""
        with self._lock:
            if self._full:
                return 0.0
            times = list(self._pending.values()) + list(self._pending_dirs.values())
        if not times:
            return None
        return max(0.0, min(times) + self.settle - time.monotonic())


def _explain(exc: OSError) -> str:
    if exc.errno in (28, 24):  # ENOSPC, EMFILE: the inotify limits
        return (
            f"native file watching is unavailable ({exc.strerror}): the inotify limit is reached; "
            "raise it with `sysctl fs.inotify.max_user_watches=524288` (and "
            "fs.inotify.max_user_instances); polling the vault meanwhile"
        )
    return f"native file watching is unavailable ({exc}); polling the vault meanwhile"
