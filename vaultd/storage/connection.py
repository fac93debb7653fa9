"""The manifest's SQLite file, opened: one writing connection behind a lock, a small pool of
readers, the transactions, and sqlite3's errors translated where they occur.

The manifest's controllers (`notes`, `links`, `filters`, `embeddings`, `quarantine`,
`keyword`) read through `query` and write through `transaction`; a transaction begun inside
another joins it, so that each controller's write is atomic alone and the manifest can still
make one unit of several (`Manifest.apply`)."""

from __future__ import annotations

import os
import queue
import shlex
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from vaultd.errors import DataDirError, ManifestDamagedError, StoreError
from vaultd.storage.schema import create_or_migrate, register

#: SQLite's primary result codes for a file that is not (or no longer) a database.
_DAMAGED = frozenset({11, 26})  # SQLITE_CORRUPT, SQLITE_NOTADB
#: ... and for one this process may not write (mode, `chattr +i`, a read-only mount).
_UNWRITABLE = frozenset({3, 8, 14})  # SQLITE_PERM, SQLITE_READONLY, SQLITE_CANTOPEN


def _primary(exc: sqlite3.Error) -> int:
    """SQLite's primary result code of an error (SQLITE_CORRUPT for SQLITE_CORRUPT_VTAB)."""
    return int(getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF


def is_damage(exc: sqlite3.Error) -> bool:
    """Whether SQLite says the file itself is damaged, or is no database."""
    return _primary(exc) in _DAMAGED


def _open_error(path: Path, exc: sqlite3.Error) -> StoreError:
    """The error for a manifest that cannot be opened: one a restart cannot fix is a
    DataDirError (the service manager stops retrying); anything else may pass (EIO, a full
    disk) and stays a StoreError."""
    code = _primary(exc)
    data_dir = path.parent
    if code in _DAMAGED:
        return ManifestDamagedError(str(path), str(exc))
    if code in _UNWRITABLE:
        return DataDirError(
            f"{path} cannot be opened for writing ({exc}); make it writable by you again "
            f"(chmod u+rw {shlex.quote(str(path))}; on Linux also `lsattr` it and "
            f"`chattr -i` an immutable file), or set [store] path to a writable directory",
            str(data_dir),
        )
    return StoreError(f"cannot open {path}: {exc}")


class Connection:
    """The manifest's file, opened (created or migrated first).

    Writes go through one connection behind a lock. Reads take a connection of their own from a
    small pool: in WAL mode readers never wait for the writer or for each other, so searches on
    several server threads run side by side and are not held up by a batch being recorded.
    """

    #: Idle read connections kept open; more may exist for a moment under a burst of queries.
    READERS = 4

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            register(self._db)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA busy_timeout=10000")
            create_or_migrate(self._db, self.path)
            # The connection opened the file just now, under the data directory's lock.
            opened = os.stat(self.path)
        except sqlite3.Error as exc:
            raise _open_error(self.path, exc) from exc
        except OSError as exc:
            raise StoreError(f"cannot open {self.path}: {exc.strerror or exc}") from exc
        self._opened_as = (opened.st_dev, opened.st_ino)
        self._lock = threading.RLock()
        self._readers: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._closed = False
        #: Write transactions so far, counted once ended; `_begun` once begun.
        self._writes = 0
        self._begun = 0
        #: Transactions open on the writing connection (the outermost and those joining it).
        self._depth = 0
        self._trace: Callable[[str], None] | None = None
        #: The read connection `snapshot` holds a transaction open on, per thread.
        self._pinned = threading.local()
        #: The first damage SQLite reported in this file since it was opened (None: none).
        #: Every later read or write may meet it too; the daemon stops on it.
        self.damaged: ManifestDamagedError | None = None

    def _error(self, exc: sqlite3.Error) -> StoreError:
        """`exc` translated; damage is also kept in `damaged`."""
        if not is_damage(exc):
            return StoreError(f"{self.path}: {exc}")
        damaged = ManifestDamagedError(str(self.path), str(exc))
        if self.damaged is None:
            self.damaged = damaged
        return damaged

    def check(self) -> None:
        """Read every page of the file (`PRAGMA quick_check`, about a second per 2 GB); raises
        ManifestDamagedError when any is damaged. A daemon asks once as it starts: damage
        in pages a pass reads only later would otherwise be met mid-pass."""
        try:
            with self._lock:
                rows = self._db.execute("PRAGMA quick_check(4)").fetchall()
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        problems = [
            line.strip()
            for row in rows
            for line in str(row[0]).splitlines()
            if line.strip() and not line.startswith("***")  # "*** in database main ***"
        ]
        if problems != ["ok"]:
            more = "; ..." if len(problems) > 3 else ""
            damaged = ManifestDamagedError(str(self.path), "; ".join(problems[:3]) + more)
            self.damaged = self.damaged or damaged
            raise damaged

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._close_readers()
            # SQLite leaves the log of a file deleted or replaced while open at the path (it
            # never checkpoints a moved file on close), and the next opener would apply it to
            # whatever file is there then: emptied into the file it belongs to first.
            with suppress(sqlite3.Error, OSError):
                opened, now = self.file_identity()
                if now != opened:
                    self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.close()

    @contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        try:
            db = self._readers.get_nowait()
        except queue.Empty:
            # A connection opened by name on a file swapped in would read another index, and
            # its close could checkpoint this one's log into it; one on a deleted file would
            # create an empty one.
            with suppress(OSError):  # a path that cannot be examined fails to connect too
                opened, now = self.file_identity()
                if now != opened:
                    raise StoreError(f"{self.path} was deleted or replaced while open") from None
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA query_only=1")
            db.execute("PRAGMA busy_timeout=10000")
            db.set_trace_callback(self._trace)
        try:
            yield db
        finally:
            # One still in a transaction (its end failed) would answer from it ever after.
            if self._closed or db.in_transaction or self._readers.qsize() >= self.READERS:
                db.close()
            else:
                self._readers.put(db)

    def trace(self, callback: Callable[[str], None] | None) -> None:
        """Pass every statement run on the manifest's connections to `callback` (None: stop),
        as `sqlite3` traces them: what a test counts to hold a pass's queries."""
        with self._lock:
            self._trace = callback
            self._db.set_trace_callback(callback)
            # Idle readers are closed: the next ones are opened with the callback.
            self._close_readers()

    def _close_readers(self) -> None:
        while True:
            try:
                self._readers.get_nowait().close()
            except queue.Empty:
                break

    def file_identity(self) -> tuple[tuple[int, int], tuple[int, int] | None]:
        """(device, inode) of the file opened, and of the file the path names now (None: no
        file). They differ once it was deleted or replaced while open: the connections write
        on into the file they hold, which no later start reads. Raises OSError when the path
        cannot be examined."""
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return self._opened_as, None
        return self._opened_as, (now.st_dev, now.st_ino)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction on the writing connection, committed with an fsync; one begun
        within another (on the thread holding it) joins it and commits with it."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self._db
                finally:
                    self._depth -= 1
                return
            self._begun += 1
            self._depth = 1
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                except BaseException:
                    # SQLite has rolled back already after some errors (SQLITE_CORRUPT among
                    # them): a ROLLBACK then fails, and its error would hide the real one.
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise self._error(exc) from exc
            finally:
                self._depth = 0
                self._writes += 1

    @contextmanager
    def unsynced_transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction committed without an fsync; within another, it joins that one
        (and is synced with it)."""
        with self._lock:
            if self._depth:
                with self.transaction() as db:
                    yield db
                return
            try:
                self._db.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as exc:
                raise self._error(exc) from exc
            try:
                with self.transaction() as db:
                    yield db
            finally:
                # The next synced commit flushes these pages too.
                with suppress(sqlite3.Error):
                    self._db.execute("PRAGMA synchronous=FULL")

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """One read statement's rows, on a read connection (the snapshot's, within one)."""
        try:
            pinned: sqlite3.Connection | None = getattr(self._pinned, "db", None)
            if pinned is not None:
                return pinned.execute(sql, params).fetchall()
            with self._reader() as db:
                return db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Every read on this thread within sees the same commit: one read transaction, so a
        batch recorded meanwhile is seen by all of them or by none, and an answer made of
        several reads never counts a note twice or not at all."""
        if getattr(self._pinned, "db", None) is not None:
            yield  # within one already
            return
        try:
            with self._reader() as db:
                writes = self._writes
                db.execute("BEGIN")
                try:
                    # SQLite begins a read transaction at its first read, not at BEGIN: begun
                    # now, so that a read within that answers from what it kept (`held`) and
                    # the reads after it are of one commit.
                    db.execute("SELECT COUNT(*) FROM sqlite_master").fetchall()
                    self._pinned.db = db
                    self._pinned.held = writes if self._begun == writes else None
                    yield
                finally:
                    self._pinned.db = None
                    # An error that rolled the transaction back is raised, not hidden by this.
                    if db.in_transaction:
                        db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    def held(self) -> int | None:
        """The write transactions the snapshot this thread is in sees (None: not known, a
        write was under way as it began). What is kept as of a count of writes answers a
        snapshot only when that count is this."""
        if getattr(self._pinned, "db", None) is None:
            return None
        held: int | None = self._pinned.held
        return held

    @property
    def writes(self) -> int:
        """Transactions this manifest has run: a change says its snapshots may be stale."""
        return self._writes
