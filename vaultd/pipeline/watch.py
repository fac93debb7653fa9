"""watchdog events become settled, vault-relative paths.

Events are coalesced per path and released only after the path has been quiet for the settle
time, so an atomic save (temp file + rename), vim's rename-and-write or a sync tool's burst
become one update. Directory events become subtree rescans: a folder moved in, out or renamed
is handled by comparing that subtree with the manifest, which also makes a folder moved out a
delete and a move into `.trash/` a delete.

Lost events (the kernel's queue overflowed, our own pending set overflowed, the observer died)
are reported as a request for a full reconcile, never silently dropped.

The inotify watch limit (fs.inotify.max_user_watches) reached for any folder, at start-up or
for a folder created or moved in later, switches to polling and says why: watchdog raises it only
for the root and skips other folders silently, so its inotify instance is made to report it.

Whether `x 2.md` is a note or iCloud's conflict copy depends on whether `x.md` exists, so when
a note appears or disappears its numbered siblings are handed over with it.

A vault on a network filesystem (NFS, SMB, SSHFS, a VM's shared folder...) is polled with the
"auto" backend: inotify reports only changes made through this machine's kernel, never those
made by the server or other clients. The type comes from the mount table on Linux; elsewhere it
is not looked up (macOS has no mount table file), and `[watch] backend = "polling"` is the way.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import threading
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import structlog
from watchdog.events import (
    DirAttribEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirModifiedEvent,
    DirMovedEvent,
    FileAttribEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver
from watchdog.utils import UnsupportedLibcError

from vaultd.records import kind_of

if TYPE_CHECKING:
    from watchdog.observers.inotify_c import CallbackId, Mask, WatchCallback, WatchDescriptor

log = structlog.get_logger(__name__)

#: The events asked of the OS: all but opens and closes without a write, which the indexer's
#: own reads of a first index would bring back as tens of thousands of events to drop.
WATCHED = (
    FileCreatedEvent,
    FileModifiedEvent,
    FileAttribEvent,
    FileClosedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    DirCreatedEvent,
    DirModifiedEvent,
    DirAttribEvent,
    DirDeletedEvent,
    DirMovedEvent,
)

Backend = Literal["auto", "native", "polling"]
#: More pending paths than this and a full reconcile is cheaper than tracking them.
MAX_PENDING = 20_000
POLL_INTERVAL = 2.0
#: Filesystems whose files change behind this kernel's back: native events miss what the server,
#: other clients or a VM's host change. Matched against the mount table's type column.
NETWORK_FILESYSTEMS = frozenset(
    {
        *("nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "afs", "coda", "9p", "ceph"),
        *("glusterfs", "lustre", "gpfs", "beegfs", "orangefs", "ocfs2", "gfs2", "davfs"),
        *("virtiofs", "vboxsf", "vmhgfs", "drvfs"),
    }
)
#: FUSE filesystems show as "fuse.<name>"; these names are network clients.
NETWORK_FUSE = frozenset(
    {
        *("sshfs", "rclone", "s3fs", "gcsfuse", "goofys", "juicefs", "ceph-fuse", "glusterfs"),
        *("davfs2", "vmhgfs-fuse", "smbnetfs", "curlftpfs", "afpfs"),
    }
)
MOUNT_TABLE = "/proc/self/mounts"
#: "<name> <n>.md": the shape of the names whose verdict depends on "<name>.md" existing.
_NUMBERED = re.compile(r"^(.+) \d+(\.md)$", re.IGNORECASE)


@dataclass(slots=True)
class Settled:
    """What the watcher hands the indexer: paths and subtrees to compare with the manifest."""

    paths: set[str] = field(default_factory=set)
    dirs: set[str] = field(default_factory=set)
    #: Paths whose names are not UTF-8 (undecodable bytes as lone surrogates, as os.fsdecode
    #: gives them): never notes, and never in a manifest query, but the walk reports such a
    #: name, and so must an event about one.
    undecodable: set[str] = field(default_factory=set)
    #: Events were lost: only a full reconcile is safe.
    full: bool = False
    #: The oldest event time (time.monotonic) among these, for save-to-searchable lag.
    first_event: float = 0.0

    def __bool__(self) -> bool:
        return bool(self.paths or self.dirs or self.undecodable or self.full)


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
        self._pending_undecodable: dict[str, float] = {}
        #: Pending notes that were created, deleted or moved (not just written).
        self._arrived_or_left: set[str] = set()
        self._full = False
        #: The root's own watch is gone (watchdog stops its emitter when the root is deleted,
        #: and a root deleted and recreated between two checks of the service looks alive).
        self._root_lost = False
        self._first_event = 0.0
        self._observer: BaseObserver | None = None
        #: "native", "polling", or "" when not running; shown in status.
        self.mode = ""
        self.fallback_reason = ""
        self._spy = _OverflowSpy(self.request_full)
        #: Serialises start, stop and the switch to polling (which runs on its own thread).
        self._life = threading.Lock()
        #: Counts native starts and stops, so a switch asked for by an observer that has
        #: since been stopped or replaced is dropped.
        self._generation = 0
        #: Guarded by _lock: a native start is in progress in start(), which handles a watch
        #: limit reported meanwhile itself; and the first limit reported since that start.
        self._starting = False
        self._limit: tuple[str, OSError] | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start observing; falls back to polling when native watches cannot be set up.

        "auto" polls a vault on a network filesystem from the start. With the "native"
        backend a folder that cannot be watched raises instead.
        """
        with self._life:
            logging.getLogger("watchdog.observers.inotify_c").addHandler(self._spy)
            logging.getLogger("watchdog.observers.inotify").addHandler(self._spy)
            self.fallback_reason = ""
            remote = network_filesystem(self.root) if self.backend == "auto" else None
            if remote is not None:
                self.fallback_reason = _explain_network(*remote)
            elif self.backend in ("auto", "native"):
                try:
                    self._start_native()
                    return
                except OSError as exc:
                    if self.backend == "native":
                        raise
                    self.fallback_reason = _explain(exc)
            self._start(PollingObserver(timeout=POLL_INTERVAL), "polling")

    def _start_native(self) -> None:
        self._generation += 1
        generation = self._generation
        with self._lock:
            self._starting = True
            self._limit = None
        try:
            self._start(
                _native_observer(lambda path, exc: self._limit_reached(generation, path, exc)),
                "native",
            )
        finally:
            with self._lock:
                self._starting = False
                limit, self._limit = self._limit, None
        if limit is not None:
            # Some folder below the root is unwatched (the root itself raises in _start):
            # native watching would never see a change in it.
            self._stop_observer()
            raise limit[1]

    def _start(self, observer: BaseObserver, mode: str) -> None:
        observer.schedule(self, str(self.root), recursive=True, event_filter=list(WATCHED))
        observer.daemon = True
        try:
            observer.start()
        except BaseException:
            # The inotify reader thread is already running; it would outlive the failed start.
            observer.stop()
            raise
        self._observer = observer
        self.mode = mode
        self._root_lost = False

    def stop(self) -> None:
        with self._life:
            self._generation += 1
            self._stop_observer()
            logging.getLogger("watchdog.observers.inotify_c").removeHandler(self._spy)
            logging.getLogger("watchdog.observers.inotify").removeHandler(self._spy)

    def _stop_observer(self) -> None:
        observer, self._observer = self._observer, None
        self.mode = ""
        if observer is not None:
            observer.stop()
            if observer.is_alive():
                observer.join(timeout=5)

    def _limit_reached(self, generation: int, path: bytes, exc: OSError) -> None:
        """watchdog could not watch `path`: the inotify watch limit is reached.

        Called on the thread adding the watch: start()'s own, or watchdog's inotify reader
        for a folder created or moved in later. The reader holds watchdog's locks, which
        stopping the observer needs, so the switch to polling runs on a thread of its own.
        """
        folder = self._relative(path) or os.fsdecode(path)
        with self._lock:
            if self._limit is not None:
                return  # one report per start is enough; later folders fail the same way
            self._limit = (folder, exc)
            starting = self._starting
        if not starting:
            threading.Thread(
                target=self._fall_back,
                args=(generation, folder, exc),
                name="vaultd-watch-fallback",
                daemon=True,
            ).start()

    def _fall_back(self, generation: int, folder: str, exc: OSError) -> None:
        """Replace the native observer that left `folder` unwatched; reconcile everything."""
        with self._life:
            if generation != self._generation or self.mode != "native":
                return  # stopped or restarted meanwhile; that start looked for itself
            self._stop_observer()
            if self.backend == "native":
                # Polling was ruled out: alive() is false now, so the service restarts the
                # watcher, and that start raises the limit unless it has been raised.
                log.error("a folder cannot be watched; restarting the watcher", folder=folder)
                return
            self.fallback_reason = _explain(exc)
            try:
                self._start(PollingObserver(timeout=POLL_INTERVAL), "polling")
            except OSError as error:
                # Nothing watches now, so alive() is false and the service restarts the
                # watcher (and reconciles) once it can.
                log.error("cannot poll the vault", error=str(error), reason=self.fallback_reason)
                return
        log.warning("watching by polling", reason=self.fallback_reason, unwatched=folder)
        # Changes in the unwatched folder before polling began were never reported.
        self.request_full()

    def alive(self) -> bool:
        observer = self._observer
        if observer is None or self._root_lost or not observer.is_alive():
            return False
        # The observer thread only dispatches; its emitter threads read inotify or poll the
        # disk. An emitter that died (older watchdog releases end the polling one on EBUSY or
        # ENOTCONN, #1065 and #452) leaves a running observer that never reports anything.
        return all(emitter.is_alive() for emitter in list(observer.emitters))

    # -- events --------------------------------------------------------------------------------

    def request_full(self) -> None:
        with self._lock:
            self._full = True
            self._clear_pending()
            if not self._first_event:
                self._first_event = time.monotonic()

    def _lose_root(self) -> None:
        """The root itself was deleted or moved away.

        Deletions seen just before (`rm -rf` empties the root first) are dropped, not handed
        over: they are the vault going away, not notes deleted, and must not purge the
        index. `alive()` turns false, so the service re-arms the watch and asks for a full
        reconcile once a root is there again, even one recreated between two of its checks.
        """
        with self._lock:
            self._root_lost = True
            self._clear_pending()
            self._first_event = 0.0

    def _clear_pending(self) -> None:
        self._pending.clear()
        self._pending_dirs.clear()
        self._pending_undecodable.clear()
        self._arrived_or_left.clear()

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
                undecodable = self._undecodable(raw, event.is_directory)
                if undecodable is not None:
                    self._note(self._pending_undecodable, undecodable, now)
                continue
            if rel == "":
                if event.event_type in ("deleted", "moved"):
                    self._lose_root()
                continue
            if event.is_directory:
                if not self._is_ignored(rel, True) or raw == event.src_path:
                    self._note(self._pending_dirs, rel, now)
            else:
                # Which files are notes (by kind too) is the rules' call, as in the walk.
                # A move's source of a kind vaultd reads is always considered: it may be a
                # known note leaving.
                leaving = raw == event.src_path and event.event_type == "moved"
                if (leaving and kind_of(rel) is not None) or not self._is_ignored(rel, False):
                    came_or_went = event.event_type in ("created", "deleted", "moved")
                    self._note(self._pending, rel, now, came_or_went=came_or_went)

    def _note(
        self, table: dict[str, float], rel: str, now: float, *, came_or_went: bool = False
    ) -> None:
        with self._lock:
            if self._full:
                return
            table[rel] = now
            if came_or_went:
                self._arrived_or_left.add(rel)
            if not self._first_event:
                self._first_event = now
            if self._pending_count() > MAX_PENDING:
                self._full = True
                self._clear_pending()

    def _relative(self, raw: bytes | str) -> str | None:
        path = os.fsdecode(raw)
        root = str(self.root)
        if path == root:
            return ""
        if not path.startswith(root + os.sep):
            return None
        rel = path[len(root) + 1 :].replace(os.sep, "/")
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:
            # Bytes that are not UTF-8 (a Latin-1 name): never a note nor a folder holding
            # one, even as the source of a move, and no manifest query may carry them.
            return None
        return unicodedata.normalize("NFC", rel)

    def _undecodable(self, raw: bytes | str, is_dir: bool) -> str | None:
        """The vault path of `raw` when it lies under the root, a name on it is not UTF-8,
        and it could be a note or a folder (the discovery's rules decide the rest)."""
        path = os.fsdecode(raw)
        prefix = str(self.root) + os.sep
        if not path.startswith(prefix):
            return None
        rel = path[len(prefix) :].replace(os.sep, "/")
        if _is_utf8(rel):
            return None
        folder, _, name = rel.rpartition("/")
        if is_dir or name.lower().endswith(".md") or not _is_utf8(folder):
            return rel
        return None

    # -- handing over --------------------------------------------------------------------------

    def pending(self) -> int:
        with self._lock:
            return self._pending_count() + (1 if self._full else 0)

    def _pending_count(self) -> int:
        return len(self._pending) + len(self._pending_dirs) + len(self._pending_undecodable)

    def take(self, *, force: bool = False) -> Settled:
        """Paths quiet for the settle time (all of them with `force`), removed from pending."""
        now = time.monotonic()
        cutoff = now if force else now - self.settle
        with self._lock:
            out = Settled(full=self._full, first_event=self._first_event)
            if self._full:
                self._full = False
                self._first_event = 0.0
                self._arrived_or_left.clear()
                return out
            tables = (
                (self._pending, out.paths),
                (self._pending_dirs, out.dirs),
                (self._pending_undecodable, out.undecodable),
            )
            for table, target in tables:
                for rel, seen in list(table.items()):
                    if seen <= cutoff:
                        target.add(rel)
                        del table[rel]
            if out:
                # Everything older than what remains has been handed over.
                remaining = [seen for table, _ in tables for seen in table.values()]
                self._first_event = min(remaining) if remaining else 0.0
            came_or_went = self._arrived_or_left & out.paths
            self._arrived_or_left -= came_or_went
        # Outside the lock: listing folders must not hold up the event thread.
        out.paths |= self._numbered_siblings(came_or_went)
        return out

    def _numbered_siblings(self, notes: set[str]) -> set[str]:
        """The "x <n>.md" beside each "x.md" in `notes`, as vault paths.

        The indexer decides what each one is; this only says they need a fresh look.
        """
        by_folder: dict[str, set[str]] = {}
        for rel in notes:
            folder, _, name = rel.rpartition("/")
            if name.lower().endswith(".md"):
                by_folder.setdefault(folder, set()).add(name[:-3])
        found: set[str] = set()
        for folder, stems in by_folder.items():
            try:
                names = os.listdir(os.path.join(self.root, *folder.split("/")))
            except OSError:
                continue  # the folder went too; its notes are handled as deleted
            for raw in names:
                name = unicodedata.normalize("NFC", raw)
                numbered = _NUMBERED.match(name)
                if numbered and numbered[1] in stems:
                    found.add(f"{folder}/{name}" if folder else name)
        return found

    def next_due(self) -> float | None:
        """Seconds until the oldest pending path settles, or None when nothing is pending."""
        with self._lock:
            if self._full:
                return 0.0
            times = [
                *self._pending.values(),
                *self._pending_dirs.values(),
                *self._pending_undecodable.values(),
            ]
        if not times:
            return None
        return max(0.0, min(times) + self.settle - time.monotonic())


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _native_observer(on_limit: Callable[[bytes, OSError], None]) -> BaseObserver:
    """watchdog's native observer, which on Linux reports every watch that hits the limit.

    watchdog (7.x, InotifyWatchGroup._add_callback) raises ENOSPC only for the root and skips
    any other folder it cannot watch, at start-up and for folders created or moved in later.
    This is its InotifyObserver with an inotify instance that calls `on_limit` first. With a
    watchdog without that instance (other systems, older versions) it is the stock observer.
    """
    try:
        from watchdog.observers.inotify import InotifyEmitter, InotifyObserver
        from watchdog.observers.inotify_c import InotifyFD
    except (ImportError, UnsupportedLibcError):  # no inotify on this system
        return Observer()
    if Observer is not InotifyObserver:
        return Observer()

    class ReportingInotifyFD(InotifyFD):
        def add_callback(
            self, path: bytes, mask: Mask, callback: WatchCallback, id_: CallbackId
        ) -> WatchDescriptor:
            try:
                return super().add_callback(path, mask, callback, id_)
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    on_limit(path, exc)
                raise

    class ReportingInotifyObserver(BaseObserver):
        def __init__(self) -> None:
            self._reporting_fd = ReportingInotifyFD()
            self._reporting_fd.start()
            super().__init__(InotifyEmitter, inotify_fd=self._reporting_fd)

        def on_thread_stop(self) -> None:
            super().on_thread_stop()
            self._reporting_fd.stop()
            self._reporting_fd.join()

    return ReportingInotifyObserver()


def _mount_table() -> str:
    """The kernel's table of mounts ("" where there is none, as on macOS)."""
    try:
        with open(MOUNT_TABLE, encoding="utf-8", errors="surrogateescape") as handle:
            return handle.read()
    except OSError:
        return ""


def _unescape(field: str) -> str:
    # The kernel writes a space in a mount point as \040, a tab as \011, a backslash as \134.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def filesystem_of(path: Path) -> tuple[str, str] | None:
    """(type, mount point) of the filesystem holding `path`, or None when it cannot be told.

    The mount whose point is the longest prefix of the real path; of mounts stacked on one
    point, the last (the one on top).
    """
    real = os.path.realpath(path)
    found: tuple[str, str] | None = None
    for line in _mount_table().splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point, kind = _unescape(fields[1]), fields[2]
        inside = point == "/" or real == point or real.startswith(point.rstrip("/") + "/")
        if inside and (found is None or len(point) >= len(found[1])):
            found = (kind, point)
    return found


def network_filesystem(path: Path) -> tuple[str, str] | None:
    """(type, mount point) when `path` is on a network filesystem, else None."""
    found = filesystem_of(path)
    if found is None:
        return None
    kind = found[0].lower()
    if kind in NETWORK_FILESYSTEMS or (kind.startswith("fuse.") and kind[5:] in NETWORK_FUSE):
        return found
    return None


def _explain_network(kind: str, point: str) -> str:
    return (
        f"the vault is on a network filesystem ({kind}, mounted at {point}): native file events "
        "report only changes made on this machine, not those made by the server, other "
        f"machines or a VM's host; polling the vault every {POLL_INTERVAL:g} s instead"
    )


def _explain(exc: OSError) -> str:
    if exc.errno in (28, 24):  # ENOSPC, EMFILE: the inotify limits
        return (
            f"native file watching is unavailable ({exc.strerror}): the inotify limit is reached; "
            "raise it with `sysctl fs.inotify.max_user_watches=524288` (and "
            "fs.inotify.max_user_instances); polling the vault meanwhile"
        )
    return f"native file watching is unavailable ({exc}); polling the vault meanwhile"
