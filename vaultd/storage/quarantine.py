"""The crash-and-quarantine policy: how many tries a note gets, what a crash counts against
it, and what is set aside.

The manifest remembers which notes the indexer had in hand (`in_flight`): rows still there when
the next process opens the file mean the last one died with those notes. Each becomes a
*suspect* (`suspects`, with a count of the crashes it was in hand for), which is not a failure:
the indexer tries suspects one at a time, and only a suspect that kills the process again
alone is recorded as failed (`recover`). A note that fails too often on the same content is
quarantined (`record_failure`) until it changes or is released (`release`).

Files that are no note vaultd can index (over the size cap, binary, not UTF-8 text,
unreadable) are recorded with the status 'left_out', the kind in `left_out` and the reason in
`error` (`record_left_out`): reported, never quarantined, and gone from the list once the file
is fixed or deleted.

`FailuresController` is the manifest's `failures`: these rows, the in-flight and suspects
tables, and the reads status and doctor make of them.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Sequence

from vaultd.answers import LeftOut, Quarantined
from vaultd.records import FileState, NoteFailed, NoteLeftOut
from vaultd.storage.connection import Connection

#: The reason recorded for a note the process died holding (the count is the notes' crashes).
CRASH_REASON = "crashed the indexer {} time{}"


def _crash_reason(crashes: int) -> str:
    return CRASH_REASON.format(crashes, "" if crashes == 1 else "s")


class FailuresController:
    """What could not be indexed and why, and the notes in hand in case the process dies."""

    def __init__(self, connection: Connection) -> None:
        self._query = connection.query
        self._transaction = connection.transaction
        self._unsynced_transaction = connection.unsynced_transaction

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
        quarantine_after: int,
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
            quarantined = bool(sha256) and 0 < quarantine_after <= attempts
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

    def recover(self, quarantine_after: int) -> list[tuple[str, int, bool, bool]]:
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
                        quarantine_after,
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

    def hold(self, notes: Sequence[tuple[str, int, int, str]]) -> None:
        """Note that each (path, size, mtime_ns, sha256) is about to be parsed and embedded
        (cleared by `Manifest.apply(done=...)`), in one commit.

        Committed without an fsync: the row must outlive a crash of this process, not of the
        machine, and a page in the OS cache does. It costs one small write per commit.
        """
        now = time.time()
        with self._unsynced_transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO in_flight(path, size, mtime_ns, sha256, since) "
                "VALUES (?, ?, ?, ?, ?)",
                [(*note, now) for note in notes],
            )

    def clear_in_flight(self, paths: Iterable[str]) -> None:
        """Forget notes abandoned without a crash (a graceful stop, an error raised)."""
        with self._unsynced_transaction() as db:
            db.executemany("DELETE FROM in_flight WHERE path = ?", [(p,) for p in paths])

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

    def clear_suspects(self) -> None:
        """After a complete full pass: every suspect still on disk was tried, or is unchanged
        since it was last recorded, and neither holds anything against it."""
        with self._transaction() as db:
            db.execute("DELETE FROM suspects")

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

    def suspects(self) -> dict[str, int]:
        """Notes in hand when a process died and not tried alone since: path -> crashes."""
        return dict(self._query("SELECT path, crashes FROM suspects ORDER BY path", ()))
