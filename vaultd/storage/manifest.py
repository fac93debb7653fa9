"""vaultd's own database: the source of truth for what is indexed.

One SQLite file in the data directory (WAL, synchronous=FULL) holds, per note, what was seen on
disk (size, mtime, SHA-256) and what was made of it (chunks, status), every vector by the hash
of the text it embeds, and the keyword index (FTS5, BM25) over the same chunks. Chroma is a
cache that can be rebuilt from this file at any time, so the manifest only advances after
Chroma has accepted a write.

It also remembers which notes the indexer had in hand (`in_flight`): rows still there when
the next process opens the file mean the last one died with those notes. Each becomes a
*suspect* (`suspects`, with a count of the crashes it was in hand for), which is not a failure:
the indexer tries suspects one at a time, and only a suspect that kills the process again
alone is recorded as failed. A note that fails too often on the same content is quarantined.

Files that are no note vaultd can index (over the size cap, binary, not UTF-8 text,
unreadable) are recorded with the status 'left_out', the kind in `left_out` and the reason in
`error`: reported, never quarantined, and gone from the list once the file is fixed or deleted.
"""

from __future__ import annotations

import json
import queue
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from vaultd.errors import StoreError
from vaultd.layout import MANIFEST
from vaultd.records import Chunk, KnownNote, Note

SCHEMA_VERSION = 5

#: Scripts written without spaces between words (CJK, kana, Hangul, Thai, Lao, Myanmar, Khmer):
#: the word index sees a whole run of them as one token, so chunks holding any of these
#: characters are also put in a trigram index. Code-point ranges, shared with search.py.
UNSPACED_RANGES = (
    (0x0E00, 0x0EFF),
    (0x1000, 0x109F),
    (0x1780, 0x17FF),
    (0x3040, 0x30FF),
    (0x3400, 0x9FFF),
    (0xAC00, 0xD7AF),
    (0xF900, 0xFAFF),
    (0xFF66, 0xFF9F),
    (0x20000, 0x2FFFF),
)
_UNSPACED_GLOB = "*[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in UNSPACED_RANGES) + "]*"
_FTS_COLUMNS = "title, aliases, section, text"


def _fts_triggers(table: str, when_new: str = "", when_old: str = "") -> str:
    """Keep an external-content FTS5 table in step with `chunks` (rows are never updated)."""
    cols = ", ".join(f"{{row}}.{c.strip()}" for c in _FTS_COLUMNS.split(","))
    return (
        f"CREATE TRIGGER IF NOT EXISTS {table}_ai AFTER INSERT ON chunks {when_new} BEGIN\n"
        f"    INSERT INTO {table}(rowid, {_FTS_COLUMNS})\n"
        f"    VALUES (new.n, {cols.format(row='new')});\n"
        "END;\n"
        f"CREATE TRIGGER IF NOT EXISTS {table}_ad AFTER DELETE ON chunks {when_old} BEGIN\n"
        f"    INSERT INTO {table}({table}, rowid, {_FTS_COLUMNS})\n"
        f"    VALUES ('delete', old.n, {cols.format(row='old')});\n"
        "END;\n"
    )


def _has_unspaced(row: str) -> str:
    fields = " || ' ' || ".join(f"{row}.{c.strip()}" for c in _FTS_COLUMNS.split(","))
    return f"WHEN ({fields}) GLOB '{_UNSPACED_GLOB}'"


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS notes (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    status TEXT NOT NULL,            -- 'ok', 'failed', 'quarantined' or 'left_out'
    error TEXT,
    left_out TEXT,                   -- with 'left_out': too_big, binary, not_utf8, unreadable
    attempts INTEGER NOT NULL DEFAULT 0,
    title TEXT NOT NULL DEFAULT '',
    aliases TEXT NOT NULL DEFAULT '[]',
    tags TEXT NOT NULL DEFAULT '[]',
    links TEXT NOT NULL DEFAULT '[]',
    frontmatter TEXT NOT NULL DEFAULT '{}',
    indexed_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS note_tags (
    tag TEXT NOT NULL,               -- every tag and each of its parents: a/b gives a and a/b
    path TEXT NOT NULL,
    PRIMARY KEY (tag, path)
);
CREATE INDEX IF NOT EXISTS note_tags_path ON note_tags(path);
CREATE TABLE IF NOT EXISTS note_links (
    target TEXT NOT NULL,            -- as written, lower-cased, without ".md"
    source TEXT NOT NULL,
    PRIMARY KEY (target, source)
);
CREATE INDEX IF NOT EXISTS note_links_source ON note_links(source);
CREATE TABLE IF NOT EXISTS chunks (
    n INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    path TEXT NOT NULL,
    idx INTEGER NOT NULL,
    hash TEXT NOT NULL,              -- SHA-256 of the embedded text
    title TEXT NOT NULL,
    section TEXT NOT NULL,
    headings TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    text TEXT NOT NULL,
    aliases TEXT NOT NULL DEFAULT ''  -- the note's aliases, one a line, for the keyword index
);
CREATE INDEX IF NOT EXISTS chunks_path ON chunks(path, idx);
CREATE INDEX IF NOT EXISTS chunks_hash ON chunks(hash);
CREATE TABLE IF NOT EXISTS vectors (
    model TEXT NOT NULL,
    hash TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model, hash)
);
CREATE TABLE IF NOT EXISTS in_flight (
    path TEXT PRIMARY KEY,           -- read for the batch being indexed, not yet written
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    since REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS suspects (
    path TEXT PRIMARY KEY,           -- in hand when a process died, not yet tried alone
    sha256 TEXT NOT NULL,
    crashes INTEGER NOT NULL,        -- deaths it was in hand for, with this content
    since REAL NOT NULL
);
"""

#: The keyword indexes: words (stemmed, accents folded) over every chunk, and trigrams over the
#: chunks that hold unspaced-script text. Both read their text from `chunks`; schema changes to
#: them are migrated by rebuilding from there, never by embedding again.
_FTS_SCHEMA = (
    f"""
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    {_FTS_COLUMNS}, content='chunks', content_rowid='n',
    tokenize='porter unicode61 remove_diacritics 2'
);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_tri USING fts5(
    {_FTS_COLUMNS}, content='chunks', content_rowid='n', tokenize='trigram'
);
"""
    + _fts_triggers("chunks_fts")
    + _fts_triggers("chunks_tri", _has_unspaced("new"), _has_unspaced("old"))
)
_FTS_DROP = """
DROP TRIGGER IF EXISTS chunks_ai; DROP TRIGGER IF EXISTS chunks_ad;
DROP TRIGGER IF EXISTS chunks_fts_ai; DROP TRIGGER IF EXISTS chunks_fts_ad;
DROP TRIGGER IF EXISTS chunks_tri_ai; DROP TRIGGER IF EXISTS chunks_tri_ad;
DROP TABLE IF EXISTS chunks_fts; DROP TABLE IF EXISTS chunks_tri;
"""


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """A chunk as recorded, with the note fields search and the store need."""

    id: str
    path: str
    index: int
    hash: str
    title: str
    section: str
    headings: tuple[str, ...]
    start_line: int
    end_line: int
    tokens: int
    text: str


@dataclass(frozen=True, slots=True)
class NoteUpdate:
    """Everything one note's successful indexing writes, applied in one transaction."""

    note: Note
    size: int
    mtime_ns: int
    sha256: str
    chunks: Sequence[Chunk]
    #: Vectors computed for this update, by text hash (reused ones are already stored).
    new_vectors: dict[str, np.ndarray]


def link_key(target: str) -> str:
    """How link targets are compared: case-insensitive, with or without ".md"."""
    key = target.strip().lower()
    return key[:-3] if key.endswith(".md") else key


def tag_ancestors(tags: Iterable[str]) -> set[str]:
    """`a/b/c` also answers to `a` and `a/b`: nested tags match their parents."""
    out: set[str] = set()
    for tag in tags:
        parts = tag.split("/")
        out.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    return out


KeywordIndex = Literal["words", "trigrams"]
_KEYWORD_TABLES: dict[str, str] = {"words": "chunks_fts", "trigrams": "chunks_tri"}
#: BM25 column weights for title, aliases, heading path and text (see docs/search.md).
KEYWORD_WEIGHTS: tuple[float, float, float, float] = (4.0, 4.0, 2.0, 1.0)

#: The reason recorded for a note the process died holding; the count is read back from it.
CRASH_REASON = "crashed the indexer {} time{}"
_CRASH_PREFIX = CRASH_REASON.split("{", 1)[0]


def _crash_reason(crashes: int) -> str:
    return CRASH_REASON.format(crashes, "" if crashes == 1 else "s")


def _crashes_in(reason: str | None) -> int:
    if not reason or not reason.startswith(_CRASH_PREFIX):
        return 0
    count = reason[len(_CRASH_PREFIX) :].split(" ", 1)[0]
    return int(count) if count.isdigit() else 0


@dataclass(frozen=True, slots=True)
class Quarantined:
    """A note set aside after failing `attempts` times on the same content."""

    path: str
    reason: str
    attempts: int
    #: When it was last tried (epoch seconds): the moment it was quarantined.
    since: float

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "reason": self.reason,
            "attempts": self.attempts,
            "since": self.since,
        }


@dataclass(frozen=True, slots=True)
class LeftOut:
    """A file that is no note vaultd can index: over the size cap, binary, not UTF-8 text or
    unreadable. A note that was indexed before keeps its last good chunks (except one over the
    cap, which the rules no longer count as a note)."""

    path: str
    kind: str
    reason: str
    #: When it was last found so (epoch seconds).
    since: float

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "reason": self.reason, "since": self.since}


Scalar = str | int | float | bool | None
ConditionOp = Literal["eq", "in", "gt", "gte", "lt", "lte"]


@dataclass(frozen=True, slots=True)
class Condition:
    """A test on one frontmatter field; a list-valued field passes when any item does.

    `eq` and `in` compare strings case-insensitively and numbers with their text forms; the
    ranges compare numbers, or ISO dates (`YYYY-MM-DD` compares the day a value falls on).
    """

    field: str
    op: ConditionOp
    value: Scalar | tuple[Scalar, ...]


class Manifest:
    """The SQLite manifest.

    Writes go through one connection behind a lock. Reads take a connection of their own from a
    small pool: in WAL mode readers never wait for the writer or for each other, so searches on
    several server threads run side by side and are not held up by a batch being recorded.
    """

    #: Idle read connections kept open; more may exist for a moment under a burst of queries.
    READERS = 4

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / MANIFEST
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA busy_timeout=10000")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} was written by a newer vaultd (schema {version}); upgrade vaultd"
                )
            if 0 < version < 3:
                self._migrate_keyword_index()
            elif 3 <= version < SCHEMA_VERSION:
                # Schema 4 added the in_flight table (and the 'quarantined' status), schema 5
                # the suspects table and the notes' left_out column (and the 'left_out'
                # status): the migration adds what is missing and touches nothing else.
                self._db.executescript(
                    f"BEGIN IMMEDIATE;\n{self._added_columns()}{_SCHEMA}"
                    f"PRAGMA user_version={SCHEMA_VERSION};\nCOMMIT;\n"
                )
            else:
                self._db.executescript(_SCHEMA + _FTS_SCHEMA)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {self.path}: {exc}") from exc
        self._lock = threading.RLock()
        self._readers: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._closed = False

    def _added_columns(self) -> str:
        """The ALTER TABLE statements an older notes table needs (schema 5's left_out)."""
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(notes)")}
        return "" if "left_out" in columns else "ALTER TABLE notes ADD COLUMN left_out TEXT;\n"

    def _migrate_keyword_index(self) -> None:
        """Rebuild the keyword indexes of an older schema from the stored chunks, atomically.

        Schema 1 did not stem; schema 2 had no aliases column and no trigram index. Nothing is
        embedded again: the chunks' texts are all the indexes need.
        """
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(chunks)")}
        add_aliases = (
            "ALTER TABLE chunks ADD COLUMN aliases TEXT NOT NULL DEFAULT '';\n"
            if "aliases" not in columns
            else ""
        )
        script = (
            "BEGIN IMMEDIATE;\n"
            + _FTS_DROP
            + add_aliases
            + self._added_columns()
            + "UPDATE chunks SET aliases = COALESCE((SELECT group_concat(a.value, char(10)) "
            "FROM notes, json_each(notes.aliases) AS a WHERE notes.path = chunks.path), '');\n"
            + _SCHEMA
            + _FTS_SCHEMA
            + "INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild');\n"
            + f"INSERT INTO chunks_tri(rowid, {_FTS_COLUMNS}) SELECT n, {_FTS_COLUMNS} "
            + f"FROM chunks AS new {_has_unspaced('new').replace('WHEN', 'WHERE', 1)};\n"
            + f"PRAGMA user_version={SCHEMA_VERSION};\n"
            + "COMMIT;\n"
        )
        try:
            self._db.executescript(script)
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._db.close()
            while True:
                try:
                    self._readers.get_nowait().close()
                except queue.Empty:
                    break

    @contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        try:
            db = self._readers.get_nowait()
        except queue.Empty:
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA query_only=1")
            db.execute("PRAGMA busy_timeout=10000")
        try:
            yield db
        finally:
            if self._closed or self._readers.qsize() >= self.READERS:
                db.close()
            else:
                self._readers.put(db)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: {exc}") from exc

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        try:
            with self._reader() as db:
                return db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {exc}") from exc

    # -- meta ----------------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        rows = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    def set_meta(self, key: str, value: str) -> None:
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    # -- reads ---------------------------------------------------------------------------------

    def known(self) -> dict[str, KnownNote]:
        rows = self._query("SELECT path, size, mtime_ns, sha256, status, attempts FROM notes")
        return {r[0]: _known(r) for r in rows}

    def known_subset(self, paths: Iterable[str], dirs: Iterable[str]) -> dict[str, KnownNote]:
        """The known notes among `paths` and under the folders `dirs`."""
        cols = "SELECT path, size, mtime_ns, sha256, status, attempts FROM notes"
        rows: list[Any] = []
        for batch in _batches(sorted(set(paths)), 500):
            rows += self._query(f"{cols} WHERE path IN ({','.join('?' * len(batch))})", batch)
        for folder in dirs:
            prefix = folder.strip("/") + "/"
            rows += self._query(f"{cols} WHERE substr(path, 1, ?) = ?", (len(prefix), prefix))
        return {r[0]: _known(r) for r in rows}

    def chunk_ids(self, path: str | None = None) -> list[str]:
        if path is None:
            return [r[0] for r in self._query("SELECT id FROM chunks ORDER BY id")]
        return [
            r[0] for r in self._query("SELECT id FROM chunks WHERE path = ? ORDER BY idx", (path,))
        ]

    def chunks_of(self, path: str) -> list[StoredChunk]:
        rows = self._query(
            f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE path = ? ORDER BY idx", (path,)
        )
        return [_stored(r) for r in rows]

    def chunks_by_id(self, ids: Sequence[str]) -> dict[str, StoredChunk]:
        out: dict[str, StoredChunk] = {}
        for batch in _batches(list(ids), 500):
            marks = ",".join("?" * len(batch))
            for row in self._query(
                f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE id IN ({marks})", batch
            ):
                out[row[0]] = _stored(row)
        return out

    def tags_of(self, paths: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """The tags each of these notes carries, as written (for search hits)."""
        rows = self._query(
            "SELECT path, tags FROM notes WHERE path IN (SELECT value FROM json_each(?))",
            (json.dumps(list(paths), ensure_ascii=False),),
        )
        return {r[0]: tuple(json.loads(r[1])) for r in rows}

    def note_row(self, path: str) -> dict[str, Any] | None:
        rows = self._query(
            "SELECT path, title, aliases, tags, links, frontmatter, sha256, mtime_ns, status, "
            "error FROM notes WHERE path = ?",
            (path,),
        )
        if not rows:
            return None
        r = rows[0]
        return {
            "path": r[0],
            "title": r[1],
            "aliases": json.loads(r[2]),
            "tags": json.loads(r[3]),
            "links": json.loads(r[4]),
            "frontmatter": json.loads(r[5]),
            "sha256": r[6],
            "mtime_ns": r[7],
            "status": r[8],
            "error": r[9],
        }

    def note_paths(self) -> list[str]:
        """Every note the index holds (a link resolves to any of them)."""
        return [r[0] for r in self._query("SELECT path FROM notes")]

    def backlinks(self, path: str, aliases: Iterable[str] = ()) -> list[str]:
        """Notes linking to `path` by its name, its path or one of its aliases."""
        stem = path[:-3] if path.lower().endswith(".md") else path
        keys = {link_key(stem), link_key(stem.rsplit("/", 1)[-1])}
        keys.update(link_key(a) for a in aliases)
        marks = ",".join("?" * len(keys))
        rows = self._query(
            f"SELECT DISTINCT source FROM note_links WHERE target IN ({marks}) AND source != ? "
            "ORDER BY source",
            [*sorted(keys), path],
        )
        return [r[0] for r in rows]

    def vectors(self, model: str, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for batch in _batches(sorted(set(hashes)), 500):
            marks = ",".join("?" * len(batch))
            rows = self._query(
                f"SELECT hash, vector FROM vectors WHERE model = ? AND hash IN ({marks})",
                [model, *batch],
            )
            for h, blob in rows:
                out[h] = np.frombuffer(blob, dtype=np.float32)
        return out

    def failed(self) -> list[tuple[str, str, int]]:
        rows = self._query(
            "SELECT path, COALESCE(error, ''), attempts FROM notes WHERE status = 'failed' "
            "ORDER BY path"
        )
        return [(r[0], r[1], r[2]) for r in rows]

    def quarantined(self) -> list[Quarantined]:
        rows = self._query(
            "SELECT path, COALESCE(error, ''), attempts, indexed_at FROM notes "
            "WHERE status = 'quarantined' ORDER BY path"
        )
        return [Quarantined(r[0], r[1], r[2], r[3]) for r in rows]

    def left_out(self) -> list[LeftOut]:
        rows = self._query(
            "SELECT path, COALESCE(left_out, ''), COALESCE(error, ''), indexed_at FROM notes "
            "WHERE status = 'left_out' ORDER BY path"
        )
        return [LeftOut(r[0], r[1], r[2], r[3]) for r in rows]

    def counts(self) -> dict[str, int]:
        by_status = dict(self._query("SELECT status, COUNT(*) FROM notes GROUP BY status"))
        chunks = self._query("SELECT COUNT(*) FROM chunks")[0][0]
        return {
            "notes": by_status.get("ok", 0),
            "failed": by_status.get("failed", 0),
            "quarantined": by_status.get("quarantined", 0),
            "left_out": by_status.get("left_out", 0),
            "chunks": chunks,
        }

    def in_flight(self) -> list[str]:
        return [r[0] for r in self._query("SELECT path FROM in_flight ORDER BY path")]

    def suspects(self) -> dict[str, int]:
        """Notes in hand when a process died and not tried alone since: path -> crashes."""
        return dict(self._query("SELECT path, crashes FROM suspects ORDER BY path"))

    # -- writes --------------------------------------------------------------------------------

    def apply(
        self,
        model: str,
        updates: Sequence[NoteUpdate] = (),
        deleted: Sequence[str] = (),
        touched: Sequence[tuple[str, int, int]] = (),
        failed: Sequence[tuple[str, int, int, str, str]] = (),
        *,
        left_out: Sequence[tuple[str, int, int, str, str, str]] = (),
        quarantine_after: int = 0,
        done: Iterable[str] = (),
    ) -> list[str]:
        """Record one batch of outcomes atomically; return the notes quarantined by it.

        `touched` is (path, size, mtime_ns) for notes whose bytes did not change; `failed` is
        (path, size, mtime_ns, sha256, reason); a failed note keeps its last good chunks, and
        is quarantined once it has failed `quarantine_after` times (0: never) on the same
        content. `left_out` is (path, size, mtime_ns, sha256, kind, reason) for files that are
        no note vaultd can index; they keep their last good chunks too (a path also in
        `deleted` loses them first). `done` are notes no longer in flight, and no longer
        suspects: each was recorded one way or another without killing the process.
        """
        now = time.time()
        quarantined: list[str] = []
        with self._transaction() as db:
            for path in deleted:
                db.execute("DELETE FROM chunks WHERE path = ?", (path,))
                db.execute("DELETE FROM note_tags WHERE path = ?", (path,))
                db.execute("DELETE FROM note_links WHERE source = ?", (path,))
                db.execute("DELETE FROM notes WHERE path = ?", (path,))
                db.execute("DELETE FROM suspects WHERE path = ?", (path,))
            for path, size, mtime_ns in touched:
                db.execute(
                    "UPDATE notes SET size = ?, mtime_ns = ? WHERE path = ?", (size, mtime_ns, path)
                )
            for path, size, mtime_ns, sha256, reason in failed:
                attempts = _attempt(db, path, sha256)
                if _record_failure(
                    db, (path, size, mtime_ns, sha256), reason, attempts, quarantine_after, now
                ):
                    quarantined.append(path)
            for path, size, mtime_ns, sha256, kind, reason in left_out:
                _record_left_out(db, (path, size, mtime_ns, sha256), kind, reason, now)
            for update in updates:
                self._write_note(db, model, update, now)
            finished = [(p,) for p in done]
            db.executemany("DELETE FROM in_flight WHERE path = ?", finished)
            db.executemany("DELETE FROM suspects WHERE path = ?", finished)
        return quarantined

    # -- notes in hand, and what a crash leaves behind -----------------------------------------

    def mark_in_flight(self, path: str, size: int, mtime_ns: int, sha256: str) -> None:
        """Note that `path` is about to be parsed and embedded (cleared by `apply(done=...)`).

        Committed without an fsync: the row must outlive a crash of this process, not of the
        machine, and a page in the OS cache does. It costs one small write per note.
        """
        with self._unsynced_transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO in_flight(path, size, mtime_ns, sha256, since) "
                "VALUES (?, ?, ?, ?, ?)",
                (path, size, mtime_ns, sha256, time.time()),
            )

    def clear_in_flight(self, paths: Iterable[str]) -> None:
        """Forget notes abandoned without a crash (a graceful stop, an error raised)."""
        with self._unsynced_transaction() as db:
            db.executemany("DELETE FROM in_flight WHERE path = ?", [(p,) for p in paths])

    @contextmanager
    def _unsynced_transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._db.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: {exc}") from exc
            try:
                with self._transaction() as db:
                    yield db
            finally:
                # The next synced commit flushes these pages too.
                with suppress(sqlite3.Error):
                    self._db.execute("PRAGMA synchronous=FULL")

    def recover_in_flight(self, quarantine_after: int) -> list[tuple[str, int, bool, bool]]:
        """Count one crash against every note the last process died holding.

        Returns (path, crashes, failed, quarantined) for each. Being in hand when the process
        died proves nothing against a note: a `kill -9`, an OOM kill or a power cut meets every
        note in flight. So each becomes a suspect, which is not reported, and the indexer tries
        it alone. Only a suspect that was alone in flight and dies again (its second crash on
        this content, the last one alone) is recorded as failed ("crashed the indexer N
        times"), and quarantined at `quarantine_after` attempts; it stays a suspect meanwhile.
        A note that is recorded any other way stops being a suspect (`apply(done=...)`).
        """
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
                    "SELECT sha256, status, error FROM notes WHERE path = ?", (path,)
                ).fetchone()
                if suspect is not None:
                    before = int(suspect[0])
                elif previous is not None and previous[0] == sha256 and previous[1] != "ok":
                    # A note released from quarantine carries its count in its reason only.
                    before = _crashes_in(previous[2])
                else:
                    before = 0
                crashes = before + 1
                failed = quarantined = False
                if alone and before:
                    attempts = max(_attempt(db, path, sha256), crashes)
                    quarantined = _record_failure(
                        db,
                        (path, size, mtime_ns, sha256),
                        _crash_reason(crashes),
                        attempts,
                        quarantine_after,
                        since,
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

    def clear_suspects(self) -> None:
        """After a complete full pass: every suspect still on disk was tried, or is unchanged
        since it was last recorded, and neither holds anything against it."""
        with self._transaction() as db:
            db.execute("DELETE FROM suspects")

    def release(self, paths: Iterable[str]) -> list[str]:
        """Give quarantined notes among `paths` one more try (they keep their attempt count,
        so one more failure quarantines them again)."""
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

    def _write_note(self, db: sqlite3.Connection, model: str, u: NoteUpdate, now: float) -> None:
        note = u.note
        db.executemany(
            "INSERT OR IGNORE INTO vectors(model, hash, vector) VALUES (?, ?, ?)",
            [
                (model, h, np.asarray(v, dtype=np.float32).tobytes())
                for h, v in u.new_vectors.items()
            ],
        )
        db.execute("DELETE FROM chunks WHERE path = ?", (note.path,))
        db.executemany(
            "INSERT INTO chunks(id, path, idx, hash, title, section, headings, start_line, "
            "end_line, tokens, text, aliases) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    c.id,
                    note.path,
                    c.index,
                    c.hash,
                    note.title,
                    c.section,
                    json.dumps(list(c.headings), ensure_ascii=False),
                    c.start_line,
                    c.end_line,
                    c.tokens,
                    c.text,
                    "\n".join(note.aliases),
                )
                for c in u.chunks
            ],
        )
        db.execute("DELETE FROM note_links WHERE source = ?", (note.path,))
        db.executemany(
            "INSERT OR IGNORE INTO note_links(target, source) VALUES (?, ?)",
            [(link_key(link.target), note.path) for link in note.links],
        )
        db.execute("DELETE FROM note_tags WHERE path = ?", (note.path,))
        db.executemany(
            "INSERT INTO note_tags(tag, path) VALUES (?, ?)",
            [(t, note.path) for t in sorted(tag_ancestors(note.tags))],
        )
        db.execute(
            "INSERT OR REPLACE INTO notes(path, size, mtime_ns, sha256, status, error, attempts, "
            "title, aliases, tags, links, frontmatter, indexed_at) "
            "VALUES (?, ?, ?, ?, 'ok', ?, 0, ?, ?, ?, ?, ?, ?)",
            (
                note.path,
                u.size,
                u.mtime_ns,
                u.sha256,
                "; ".join(note.errors) or None,
                note.title,
                json.dumps(list(note.aliases), ensure_ascii=False),
                json.dumps(list(note.tags), ensure_ascii=False),
                json.dumps(
                    [
                        {
                            "target": link.target,
                            "heading": link.heading,
                            "block": link.block,
                            "alias": link.alias,
                            "embed": link.embed,
                            "line": link.line,
                        }
                        for link in note.links
                    ],
                    ensure_ascii=False,
                ),
                json.dumps(note.frontmatter, ensure_ascii=False, default=str),
                now,
            ),
        )

    def prune_vectors(self, model: str) -> int:
        """Forget vectors no chunk uses any more; run after a whole pass, not mid-way."""
        with self._transaction() as db:
            cursor = db.execute(
                "DELETE FROM vectors WHERE model = ? AND hash NOT IN (SELECT hash FROM chunks)",
                (model,),
            )
            return cursor.rowcount

    # -- keyword search ------------------------------------------------------------------------

    def keyword(
        self,
        match: str,
        limit: int,
        paths: Sequence[str] | None = None,
        *,
        weights: Sequence[float] = KEYWORD_WEIGHTS,
        index: KeywordIndex = "words",
        require: str = "",
    ) -> list[tuple[str, float]]:
        """(chunk id, BM25 score; higher is better) for an FTS5 MATCH expression.

        `index` is "words" (stemmed) or "trigrams" (unspaced scripts); `weights` are the BM25
        column weights for title, aliases, heading path and text; `paths` restricts the notes;
        `require` is a second MATCH expression every row must also satisfy (BM25 stays that of
        `match`).
        """
        table = _KEYWORD_TABLES[index]
        bm25 = f"-bm25({table}, {', '.join(str(float(w)) for w in weights)})"
        also = f" AND rowid IN (SELECT rowid FROM {table} WHERE {table} MATCH ?)" if require else ""
        extra: list[Any] = [require] if require else []
        if paths is None:
            # Rank inside FTS5 first and join only the winners: most of a query's cost
            # otherwise goes into joining every matching chunk.
            sql = (
                f"SELECT c.id, f.score FROM (SELECT rowid, {bm25} AS score FROM {table} "
                f"WHERE {table} MATCH ?{also} ORDER BY score DESC LIMIT ?) f "
                "JOIN chunks c ON c.n = f.rowid ORDER BY f.score DESC, c.path, c.start_line"
            )
            return [(r[0], float(r[1])) for r in self._query(sql, (match, *extra, limit))]
        if not paths:
            return []
        sql = (
            f"SELECT c.id, {bm25} AS score FROM {table} "
            f"JOIN chunks c ON c.n = {table}.rowid WHERE {table} MATCH ?{also} "
            "AND c.path IN (SELECT value FROM json_each(?)) "
            "ORDER BY score DESC, c.path, c.start_line LIMIT ?"
        )
        params = (match, *extra, json.dumps(list(paths), ensure_ascii=False), limit)
        return [(r[0], float(r[1])) for r in self._query(sql, params)]

    def substring(
        self,
        terms: Sequence[str],
        limit: int,
        paths: Sequence[str] | None = None,
        *,
        weights: Sequence[float] = KEYWORD_WEIGHTS,
    ) -> list[tuple[str, float]]:
        """Chunks containing any of `terms` as a substring (for terms too short for trigrams).

        A scan of the chunk texts, ranked by the distinct terms a chunk contains, then by its
        occurrences (weighted by column like BM25), then by path and line. The score is
        `terms matched + occurrences / (occurrences + 1)`, which orders the same way.
        """
        terms = [t.casefold() for t in dict.fromkeys(terms) if t]
        if not terms or (paths is not None and not paths):
            return []
        haystack = "lower(title || ' ' || aliases || ' ' || section || ' ' || text)"
        sql = (
            "SELECT id, path, start_line, title, aliases, section, text FROM chunks WHERE ("
            + " OR ".join(f"instr({haystack}, ?) > 0" for _ in terms)
            + ")"
        )
        params: list[Any] = [t.lower() for t in terms]
        if paths is not None:
            sql += " AND path IN (SELECT value FROM json_each(?))"
            params.append(json.dumps(list(paths), ensure_ascii=False))
        scored: list[tuple[float, str, int, str]] = []
        for chunk_id, path, start_line, *fields in self._query(sql, params):
            folded = [f.casefold() for f in fields]
            matched = 0
            occurrences = 0.0
            for term in terms:
                counts = [f.count(term) for f in folded]
                if any(counts):
                    matched += 1
                    occurrences += sum(w * n for w, n in zip(weights, counts, strict=True))
            if matched:
                score = matched + occurrences / (occurrences + 1)
                scored.append((-score, path, start_line, chunk_id))
        scored.sort()
        return [(chunk_id, -neg) for neg, _, _, chunk_id in scored[:limit]]

    def paths_matching(
        self,
        tags: Sequence[str] = (),
        path_prefix: str = "",
        *,
        tags_any: Sequence[str] = (),
        conditions: Sequence[Condition] = (),
        modified_since_ns: int | None = None,
    ) -> list[str] | None:
        """Notes passing every filter, or None when there is no filter.

        `tags` must all be present and one of `tags_any` must be (nested tags match their
        parents); `conditions` test frontmatter fields (see `Condition`); `modified_since_ns`
        compares with the file's mtime.
        """
        if not (tags or path_prefix or tags_any or conditions or modified_since_ns is not None):
            return None
        # Failed, quarantined and left-out notes keep their last good chunks, and filters find
        # them too.
        sql = "SELECT path FROM notes WHERE status IN ('ok', 'failed', 'quarantined', 'left_out')"
        params: list[Any] = []
        for tag in tags:
            sql += " AND path IN (SELECT path FROM note_tags WHERE tag = ?)"
            params.append(tag)
        if tags_any:
            sql += (
                " AND path IN (SELECT path FROM note_tags "
                "WHERE tag IN (SELECT value FROM json_each(?)))"
            )
            params.append(json.dumps(list(tags_any), ensure_ascii=False))
        if path_prefix:
            prefix = path_prefix.strip("/")
            sql += " AND (path = ? OR substr(path, 1, ?) = ?)"
            params.extend([prefix, len(prefix) + 1, prefix + "/"])
        if modified_since_ns is not None:
            sql += " AND mtime_ns >= ?"
            params.append(modified_since_ns)
        for condition in conditions:
            clause, more = _condition_sql(condition)
            sql += f" AND {clause}"
            params.extend(more)
        return [r[0] for r in self._query(sql + " ORDER BY path", params)]


_CHUNK_COLUMNS = "id, path, idx, hash, title, section, headings, start_line, end_line, tokens, text"


def _known(row: Sequence[Any]) -> KnownNote:
    path, size, mtime_ns, sha256, status, attempts = row
    return KnownNote(
        path, size, mtime_ns, sha256, status == "ok", attempts, quarantined=status == "quarantined"
    )


def _attempt(db: sqlite3.Connection, path: str, sha256: str) -> int:
    """Which attempt on this content a failure is: the count starts again when it changes."""
    row = db.execute(
        "SELECT sha256, status, attempts FROM notes WHERE path = ?", (path,)
    ).fetchone()
    if row is None or row[0] != sha256 or row[1] in ("ok", "left_out"):
        return 1
    return int(row[2]) + 1


def _record_failure(
    db: sqlite3.Connection,
    state: tuple[str, int, int, str],
    reason: str,
    attempts: int,
    quarantine_after: int,
    when: float,
) -> bool:
    """Mark a note failed, keeping its last good chunks and fields; True if now quarantined.

    An unread note (no hash) is never quarantined: nothing would tell when it changed.
    """
    path, size, mtime_ns, sha256 = state
    quarantined = bool(sha256) and 0 < quarantine_after <= attempts
    db.execute(
        "INSERT INTO notes(path, size, mtime_ns, sha256, status, error, attempts, indexed_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(path) DO UPDATE SET size = excluded.size, mtime_ns = excluded.mtime_ns, "
        "sha256 = excluded.sha256, status = excluded.status, error = excluded.error, "
        "left_out = NULL, attempts = excluded.attempts, indexed_at = excluded.indexed_at",
        (
            path,
            size,
            mtime_ns,
            sha256,
            "quarantined" if quarantined else "failed",
            reason,
            attempts,
            when,
        ),
    )
    return quarantined


def _record_left_out(
    db: sqlite3.Connection, state: tuple[str, int, int, str], kind: str, reason: str, when: float
) -> None:
    """Mark a file left out, keeping a note's last good chunks and fields. `attempts` counts
    the passes that found it so in a row (never quarantined: it is retried on every pass)."""
    path, size, mtime_ns, sha256 = state
    db.execute(
        "INSERT INTO notes(path, size, mtime_ns, sha256, status, error, left_out, attempts, "
        "indexed_at) VALUES (?, ?, ?, ?, 'left_out', ?, ?, 1, ?) "
        "ON CONFLICT(path) DO UPDATE SET size = excluded.size, mtime_ns = excluded.mtime_ns, "
        "sha256 = excluded.sha256, status = 'left_out', error = excluded.error, "
        "left_out = excluded.left_out, "
        "attempts = CASE WHEN notes.status = 'left_out' THEN notes.attempts + 1 ELSE 1 END, "
        "indexed_at = excluded.indexed_at",
        (path, size, mtime_ns, sha256, reason, kind, when),
    )


def _stored(row: Sequence[Any]) -> StoredChunk:
    return StoredChunk(
        id=row[0],
        path=row[1],
        index=row[2],
        hash=row[3],
        title=row[4],
        section=row[5],
        headings=tuple(json.loads(row[6])),
        start_line=row[7],
        end_line=row[8],
        tokens=row[9],
        text=row[10],
    )


def _batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# -- frontmatter conditions ----------------------------------------------------------------------

_RANGE_SQL = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


def _number_text(value: float) -> str:
    """How YAML would have written a number as text: 3, not 3.0."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _equals_sql(value: Scalar, val: str, kind: str) -> tuple[str, list[Any]]:
    if value is None:
        return f"{kind} = 'null'", []
    if isinstance(value, bool):
        return f"{kind} = '{'true' if value else 'false'}'", []
    if isinstance(value, int | float):
        return (
            f"(({kind} IN ('integer', 'real') AND {val} = ?) OR ({kind} = 'text' AND {val} = ?))",
            [value, _number_text(value)],
        )
    return (
        f"(({kind} = 'text' AND {val} = ? COLLATE NOCASE) "
        f"OR ({kind} IN ('integer', 'real') AND CAST({val} AS TEXT) = ?))",
        [value, value],
    )


def _test_sql(condition: Condition, val: str, kind: str) -> tuple[str, list[Any]]:
    op, value = condition.op, condition.value
    if op == "eq":
        return _equals_sql(value, val, kind)  # type: ignore[arg-type]
    if op == "in":
        parts = [_equals_sql(v, val, kind) for v in value]  # type: ignore[union-attr]
        if not parts:
            return "0", []
        return "(" + " OR ".join(p for p, _ in parts) + ")", [x for _, ps in parts for x in ps]
    symbol = _RANGE_SQL[op]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"({kind} IN ('integer', 'real') AND {val} {symbol} ?)", [value]
    bound = str(value)
    if len(bound) == 10:  # a date: compare the date a value falls on
        return f"({kind} = 'text' AND date({val}) {symbol} ?)", [bound]
    return f"({kind} = 'text' AND julianday({val}) {symbol} julianday(?))", [bound]


def _condition_sql(condition: Condition) -> tuple[str, list[Any]]:
    """True when the field's value, or any item of a list value, passes the test."""
    test, params = _test_sql(condition, "v.value", "v.type")
    item_test, item_params = _test_sql(condition, "e.value", "e.type")
    sql = (
        "EXISTS (SELECT 1 FROM json_each(notes.frontmatter) AS v WHERE v.key = ? AND "
        f"({test} OR (v.type = 'array' AND EXISTS "
        f"(SELECT 1 FROM json_each(v.value) AS e WHERE {item_test}))))"
    )
    return sql, [condition.field, *params, *item_params]
