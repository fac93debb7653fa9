"""The crash-and-quarantine policy: how many tries a note gets, what a crash counts against
it, and what is set aside.

A note that kills the whole process (a native crash, an OOM kill) must be found without
stopping the rest of the vault, so the manifest remembers which notes the indexer had in hand
(`hold`, the `in_flight` table): rows still there when the next process starts its first pass
mean the last one died with those notes. Each becomes a *suspect* (`suspects`, with a count of
the crashes it was in hand for in the table of that name), which is not a failure: most were
only in hand when something else killed the process. The indexer tries suspects last and one
at a time, and only a suspect that kills the process again alone is recorded as failed
(`recover`). A note that fails too often on the same content is quarantined
(`record_failure`) until it changes or the user asks for it by name (`retry`).

Files that are no note vaultd can index (over the size cap, binary, not UTF-8 text,
unreadable) are recorded with the status 'left_out', the kind in `left_out` and the reason in
`error` (`record_left_out`): reported, never quarantined, and gone from the list once the file
is fixed or deleted.

`FailuresController` is the manifest's `failures`: these rows, the in-flight and suspects
tables, the suspects of this process, and the reads status and doctor make of them.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Collection, Iterable, Sequence

import structlog

from vaultd.answers import LeftOut, Quarantined
from vaultd.errors import StoreError
from vaultd.records import Change, FileState, KnownNote, NoteFailed, NoteLeftOut
from vaultd.storage.connection import Connection

log = structlog.get_logger(__name__)

#: The reason recorded for a note the process died holding (the count is the notes' crashes).
CRASH_REASON = "crashed the indexer {} time{}"


def _crash_reason(crashes: int) -> str:
    return CRASH_REASON.format(crashes, "" if crashes == 1 else "s")


class FailuresController:
    """What could not be indexed and why, and the notes in hand in case the process dies."""

    def __init__(self, connection: Connection, quarantine_after: int = 0) -> None:
        self._query = connection.query
        self._transaction = connection.transaction
        self._unsynced_transaction = connection.unsynced_transaction
        #: Failures on the same content after which a note is quarantined (0: never).
        self.quarantine_after = quarantine_after
        #: Notes in flight when the last process died, to be tried one at a time.
        self.suspects: set[str] = set()
        self._recovered = False
        self._retry: set[str] = set()
        self._retry_lock = threading.Lock()

    # -- the notes in hand ---------------------------------------------------------------------

    def start_pass(self) -> None:
        """Before each pass: at the first of this process, the notes the last one died holding
        become suspects; quarantined notes asked for by name get their one more try."""
        if not self._recovered:
            self._recovered = True
            self._recover_in_flight()
        with self._retry_lock:
            wanted, self._retry = self._retry, set()
        if wanted:
            released = self.release(sorted(wanted))
            if released:
                log.info("quarantined notes released for one more try", paths=released)

    def retry(self, paths: Iterable[str]) -> None:
        """The user asked for these notes by name: quarantined ones get one more try at the
        start of the next pass (thread-safe; the pass runs on the indexing thread)."""
        with self._retry_lock:
            self._retry.update(paths)

    def end_full_pass(self) -> None:
        """After a complete full pass: every suspect still on disk was tried, or is unchanged
        since it was last recorded, and neither holds anything against it."""
        self.suspects.clear()
        with self._transaction() as db:
            db.execute("DELETE FROM suspects")

    def hold(self, notes: Sequence[Change | KnownNote]) -> None:
        """Note that these notes are about to be parsed or embedded (cleared by
        `Manifest.apply(done=...)`), in one commit.

        Committed without an fsync: the row must outlive a crash of this process, not of the
        machine, and a page in the OS cache does. It costs one small write per commit.
        """
        now = time.time()
        rows = [(n.path, n.size, n.mtime_ns, n.sha256, now) for n in notes]
        with self._unsynced_transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO in_flight(path, size, mtime_ns, sha256, since) "
                "VALUES (?, ?, ?, ?, ?)",
                rows,
            )

    def abandon(self, paths: Iterable[str]) -> None:
        """Abandoned (a graceful stop, an error raised), not crashed: these notes did nothing
        wrong, so no attempt is counted against them."""
        with contextlib.suppress(StoreError), self._unsynced_transaction() as db:
            db.executemany("DELETE FROM in_flight WHERE path = ?", [(p,) for p in paths])

    def _recover_in_flight(self) -> None:
        """Notes the last process died holding: suspects, tried one at a time."""
        outcomes = self.recover()
        if outcomes:
            log.warning(
                "the last run died while indexing these notes; trying them one at a time",
                paths=[path for path, *_ in outcomes],
            )
        for path, crashes, failed, quarantined in outcomes:
            if quarantined:
                log.error("note quarantined: it crashed the indexer", path=path, crashes=crashes)
            elif failed:
                log.error("note failed: it crashed the indexer alone", path=path, crashes=crashes)
        # Suspects of earlier deaths too: a process that died before trying them alone.
        self.suspects = set(self.crashes())

    # -- what is recorded ----------------------------------------------------------------------

    def _attempt(self, path: str, sha256: str) -> int:
        """Which attempt on this content a failure is: the count starts again when it changes."""
        with self._transaction() as db:
            row = db.execute(
                "SELECT sha256, status, attempts FROM notes WHERE path = ?", (path,)
            ).fetchone()
            # An 'ok' note may carry attempts: the keyword phase recorded content that failed
            # before, and its vectors are failing again.
            if row is None or row[0] != sha256 or row[1] == "left_out":
                return 1
            return int(row[2]) + 1

    def record_failure(
        self,
        failed: NoteFailed,
        when: float,
        crashes: int = 0,
        attempts: int = 0,
    ) -> bool:
        """Mark a note failed, keeping its last good chunks and fields; True if now quarantined.
        `crashes` counts the deaths of the process it was in hand for (0: it failed otherwise);
        `attempts` is which attempt on this content it was (0: counted here, see `_attempt`).

        An unread note (no hash) is never quarantined: nothing would tell when it changed.
        """
        path, size, mtime_ns = failed.state.path, failed.state.size, failed.state.mtime_ns
        sha256, reason = failed.sha256, failed.reason
        with self._transaction() as db:
            attempts = attempts or self._attempt(path, sha256)
            quarantined = bool(sha256) and 0 < self.quarantine_after <= attempts
            db.execute(
                "INSERT INTO notes(path, size, mtime_ns, sha256, status, error, attempts, "
                "crashes, indexed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(path) DO UPDATE SET size = excluded.size, "
                "mtime_ns = excluded.mtime_ns, sha256 = excluded.sha256, "
                "status = excluded.status, error = excluded.error, "
                "left_out = NULL, attempts = excluded.attempts, crashes = excluded.crashes, "
                "indexed_at = excluded.indexed_at",
                (
                    path,
                    size,
                    mtime_ns,
                    sha256,
                    "quarantined" if quarantined else "failed",
                    reason,
                    attempts,
                    crashes,
                    when,
                ),
            )
            return quarantined

    def record_left_out(self, left: NoteLeftOut, when: float) -> None:
        """Mark a file left out, keeping a note's last good chunks and fields. `attempts` counts
        the passes that found it so in a row (never quarantined: it is retried on every pass)."""
        path, size, mtime_ns, sha256 = left.path, left.state.size, left.state.mtime_ns, left.sha256
        kind, reason = left.kind, left.reason
        with self._transaction() as db:
            db.execute(
                "INSERT INTO notes(path, size, mtime_ns, sha256, status, error, left_out, "
                "attempts, indexed_at) VALUES (?, ?, ?, ?, 'left_out', ?, ?, 1, ?) "
                "ON CONFLICT(path) DO UPDATE SET size = excluded.size, "
                "mtime_ns = excluded.mtime_ns, "
                "sha256 = excluded.sha256, status = 'left_out', error = excluded.error, "
                "left_out = excluded.left_out, crashes = 0, "
                "attempts = CASE WHEN notes.status = 'left_out' THEN notes.attempts + 1 "
                "ELSE 1 END, "
                "indexed_at = excluded.indexed_at",
                (path, size, mtime_ns, sha256, reason, kind, when),
            )

    def recover(self) -> list[tuple[str, int, bool, bool]]:
        """Count one crash against every note the last process died holding (in `in_flight`),
        then empty it; returns (path, crashes, failed, quarantined) for each."""
        outcomes: list[tuple[str, int, bool, bool]] = []
        with self._transaction() as db:
            rows = db.execute(
                "SELECT path, size, mtime_ns, sha256, since FROM in_flight ORDER BY path"
            ).fetchall()
            alone = len(rows) == 1
            for path, size, mtime_ns, sha256, since in rows:
                suspect = db.execute(
                    "SELECT crashes FROM suspects WHERE path = ? AND sha256 = ?", (path, sha256)
                ).fetchone()
                previous = db.execute(
                    "SELECT sha256, status, crashes FROM notes WHERE path = ?", (path,)
                ).fetchone()
                if suspect is not None:
                    before = int(suspect[0])
                elif previous is not None and previous[0] == sha256 and previous[1] != "ok":
                    # A note released from quarantine is no suspect any more: its row keeps the
                    # count.
                    before = int(previous[2])
                else:
                    before = 0
                crashes = before + 1
                failed = quarantined = False
                if alone and before:
                    attempts = max(self._attempt(path, sha256), crashes)
                    state = FileState(path, size, mtime_ns)
                    quarantined = self.record_failure(
                        NoteFailed(state, sha256, _crash_reason(crashes)),
                        since,
                        crashes,
                        attempts,
                    )
                    failed = True
                if quarantined:
                    db.execute("DELETE FROM suspects WHERE path = ?", (path,))
                else:
                    db.execute(
                        "INSERT OR REPLACE INTO suspects(path, sha256, crashes, since) "
                        "VALUES (?, ?, ?, ?)",
                        (path, sha256, crashes, since),
                    )
                outcomes.append((path, crashes, failed, quarantined))
            db.execute("DELETE FROM in_flight")
            return outcomes

    def finish(self, done: Iterable[str], suspects: Collection[str] = ()) -> None:
        """`done` are no longer in flight, and no longer suspects, except those in `suspects`."""
        finished = [(p,) for p in done]
        cleared = [f for f in finished if f[0] not in suspects]
        with self._transaction() as db:
            db.executemany("DELETE FROM in_flight WHERE path = ?", finished)
            db.executemany("DELETE FROM suspects WHERE path = ?", cleared)

    def forget(self, path: str) -> None:
        """A deleted note is no suspect."""
        with self._transaction() as db:
            db.execute("DELETE FROM suspects WHERE path = ?", (path,))

    def release(self, paths: Iterable[str]) -> list[str]:
        """Give quarantined notes among `paths` one more try: set back to failed, they keep
        their attempt count, so one more failure quarantines them again. Returns those
        released."""
        released: list[str] = []
        with self._transaction() as db:
            for path in paths:
                cursor = db.execute(
                    "UPDATE notes SET status = 'failed' WHERE path = ? AND status = 'quarantined'",
                    (path,),
                )
                if cursor.rowcount:
                    released.append(path)
            return released

    # -- what is read ----------------------------------------------------------------------------

    def failed(self) -> list[tuple[str, str, int]]:
        """(path, reason, attempts) of every failed note."""
        rows = self._query(
            "SELECT path, COALESCE(error, ''), attempts FROM notes WHERE status = 'failed' "
            "ORDER BY path",
            (),
        )
        return [(r[0], r[1], r[2]) for r in rows]

    def quarantined(self) -> list[Quarantined]:
        rows = self._query(
            "SELECT path, COALESCE(error, ''), attempts, indexed_at FROM notes "
            "WHERE status = 'quarantined' ORDER BY path",
            (),
        )
        return [Quarantined(r[0], r[1], r[2], r[3]) for r in rows]

    def left_out(self) -> list[LeftOut]:
        rows = self._query(
            "SELECT path, COALESCE(left_out, ''), COALESCE(error, ''), indexed_at FROM notes "
            "WHERE status = 'left_out' ORDER BY path",
            (),
        )
        return [LeftOut(r[0], r[1], r[2], r[3]) for r in rows]

    def in_flight(self) -> list[str]:
        return [r[0] for r in self._query("SELECT path FROM in_flight ORDER BY path", ())]

    def in_part(self) -> list[tuple[str, str]]:
        """(path, what of it was not indexed and why) of every note indexed in part: a PDF's
        pages OCR could not read, a canvas's cards of no known type, a frontmatter ignored."""
        rows = self._query(
            "SELECT path, error FROM notes WHERE status = 'ok' AND COALESCE(error, '') != '' "
            "ORDER BY path",
            (),
        )
        return [(r[0], r[1]) for r in rows]

    def crashes(self) -> dict[str, int]:
        """Notes in hand when a process died and not tried alone since: path -> crashes."""
        return dict(self._query("SELECT path, crashes FROM suspects ORDER BY path", ()))
