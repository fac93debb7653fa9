"""The manifest, vaultd's own database and the source of truth for what is indexed; the only code
that writes it.

One SQLite file in the data directory (WAL, synchronous=FULL) holds, per note, what was seen on
disk (size, mtime, SHA-256) and what was made of it (chunks, status), every vector by the hash
of the text it embeds, and the keyword index (FTS5, BM25) over the same chunks. Chroma is a
cache that can be rebuilt from this file at any time, so the manifest only advances after
Chroma has accepted a write.

`Manifest` is the face every caller uses: it owns the connections, the lock and the
transactions, and does the bookkeeping of notes, chunks and vectors itself. The rest is in
modules it calls, each owning one thing, none importing this one:
- `schema`: the tables, the schema version and the migrations (the bottom);
- `quarantine`: the crash-and-quarantine policy (suspects, attempts, left-out files);
- `keyword`: BM25 and substring search over the chunks;
- `conditions`: frontmatter conditions compiled to SQL.
`view` reads the file for doctor without the manifest, never writing it.
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from vaultd.errors import DataDirError, StoreError
from vaultd.layout import MANIFEST
from vaultd.query import Condition
from vaultd.records import (
    FileState,
    KnownNote,
    Location,
    NoteFailed,
    NoteLeftOut,
    NoteOutcome,
    NoteWritten,
    kind_of,
)
from vaultd.storage import keyword, quarantine
from vaultd.storage.conditions import condition_sql
from vaultd.storage.keyword import KEYWORD_WEIGHTS, KeywordIndex
from vaultd.storage.quarantine import LeftOut, Quarantined
from vaultd.storage.schema import Query, create_or_migrate, register


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
    #: The `title > section` line before `text` in what the model embeds ("" if written
    #: before schema 8).
    context: str = ""
    #: Where it is besides its lines (`records.Location`); None for a Markdown note's.
    page: int | None = None
    page_end: int | None = None
    node: str | None = None
    symbol: str | None = None

    @property
    def embed_text(self) -> str:
        """What the model embeds, as the chunker made it (`chunk_note`)."""
        return f"{self.context}\n\n{self.text}"

    @property
    def location(self) -> Location:
        return Location(self.page, self.page_end, self.node, self.symbol)


@dataclass(frozen=True, slots=True)
class NoteRecord:
    """A note as recorded: what a scan compares with its file, and its fields (`note_row`)."""

    known: KnownNote
    row: dict[str, Any]


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


_T = TypeVar("_T")
#: SQLite's primary result codes for a file that is not (or no longer) a database.
_DAMAGED = frozenset({11, 26})  # SQLITE_CORRUPT, SQLITE_NOTADB
#: ... and for one this process may not write (mode, `chattr +i`, a read-only mount).
_UNWRITABLE = frozenset({3, 8, 14})  # SQLITE_PERM, SQLITE_READONLY, SQLITE_CANTOPEN


def _open_error(path: Path, exc: sqlite3.Error) -> StoreError:
    """The error for a manifest that cannot be opened: one a restart cannot fix is a
    DataDirError (the service manager stops retrying); anything else may pass (EIO, a full
    disk) and stays a StoreError."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    data_dir = path.parent
    if code in _DAMAGED:
        aside = f"{data_dir}.damaged"
        return DataDirError(
            f"{path} is damaged ({exc}); it is the index's own record and cannot be repaired "
            f"in place. Move the data directory aside and index again (every note is read and "
            f"embedded anew): mv {shlex.quote(str(data_dir))} {shlex.quote(aside)}",
            str(data_dir),
        )
    if code in _UNWRITABLE:
        return DataDirError(
            f"{path} cannot be opened for writing ({exc}); make it writable by you again "
            f"(chmod u+rw {shlex.quote(str(path))}; on Linux also `lsattr` it and "
            f"`chattr -i` an immutable file), or set [store] path to a writable directory",
            str(data_dir),
        )
    return StoreError(f"cannot open {path}: {exc}")


class Manifest:
    """The SQLite manifest.

    Writes go through one connection behind a lock. Reads take a connection of their own from a
    small pool: in WAL mode readers never wait for the writer or for each other, so searches on
    several server threads run side by side and are not held up by a batch being recorded.
    """

    #: Idle read connections kept open; more may exist for a moment under a burst of queries.
    READERS = 4
    #: Terms whose chunk counts are kept at most (a few MB).
    TERMS_KEPT = 100_000

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / MANIFEST
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
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
        #: Write transactions so far, and the awaiting totals by model as of a count of them.
        self._writes = 0
        self._totals: dict[str, tuple[int, Awaiting]] = {}
        #: As of a count of writes: the words index's chunk counts of the terms looked up and
        #: its chunks in all, and the notes by file name.
        self._terms: tuple[int, dict[str, int], int] = (-1, {}, 0)
        self._names: tuple[int, dict[str, list[str]]] = (-1, {})
        self._trace: Callable[[str], None] | None = None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            while True:
                try:
                    self._readers.get_nowait().close()
                except queue.Empty:
                    break
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
            if self._closed or self._readers.qsize() >= self.READERS:
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
            finally:
                self._writes += 1

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        try:
            with self._reader() as db:
                return db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {exc}") from exc

    def read_with(self, reader: Callable[[Query], _T]) -> _T:
        """`reader` called with this manifest's read query (for `vocabulary`'s snapshots)."""
        return reader(self._query)

    @property
    def writes(self) -> int:
        """Transactions this manifest has run: a change says its snapshots may be stale."""
        return self._writes

    # -- meta ----------------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        rows = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    def set_meta(self, key: str, value: str) -> None:
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    # -- reads ---------------------------------------------------------------------------------

    def known(self) -> dict[str, KnownNote]:
        rows = self._query(f"SELECT {_KNOWN_COLUMNS} FROM notes")
        return {r[0]: _known(r) for r in rows}

    def known_subset(self, paths: Iterable[str], dirs: Iterable[str]) -> dict[str, KnownNote]:
        """The known notes among `paths` and under the folders `dirs`."""
        cols = f"SELECT {_KNOWN_COLUMNS} FROM notes"
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

    def chunk_counts(self, paths: Sequence[str]) -> dict[str, int]:
        """How many passages each note has (notes without any are left out)."""
        out: dict[str, int] = {}
        for batch in _batches(list(paths), 500):
            marks = ",".join("?" * len(batch))
            out.update(
                self._query(
                    f"SELECT path, COUNT(*) FROM chunks WHERE path IN ({marks}) GROUP BY path",
                    batch,
                )
            )
        return out

    def paths_of_chunks(self, ids: Sequence[str]) -> dict[str, str]:
        """Each chunk's note (for chunks still indexed)."""
        out: dict[str, str] = {}
        for batch in _batches(list(ids), 500):
            marks = ",".join("?" * len(batch))
            out.update(self._query(f"SELECT id, path FROM chunks WHERE id IN ({marks})", batch))
        return out

    def tags_of(self, paths: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """The tags each of these notes carries, as written (for search hits)."""
        rows = self._query(
            "SELECT path, tags FROM notes WHERE path IN (SELECT value FROM json_each(?))",
            (json.dumps(list(paths), ensure_ascii=False),),
        )
        return {r[0]: tuple(json.loads(r[1])) for r in rows}

    def note_row(self, path: str) -> dict[str, Any] | None:
        record = self.records([path]).get(path)
        return None if record is None else record.row

    def records(self, paths: Iterable[str]) -> dict[str, NoteRecord]:
        """These notes as recorded (those the manifest holds), in one read."""
        out: dict[str, NoteRecord] = {}
        for batch in _batches(sorted(set(paths)), 500):
            marks = ",".join("?" * len(batch))
            rows = self._query(
                f"SELECT {_KNOWN_COLUMNS}, title, aliases, tags, links, frontmatter, error, kind "
                f"FROM notes WHERE path IN ({marks})",
                batch,
            )
            for r in rows:
                out[r[0]] = NoteRecord(
                    _known(r[:10]),
                    {
                        "path": r[0],
                        "title": r[10],
                        "aliases": json.loads(r[11]),
                        "tags": json.loads(r[12]),
                        "links": json.loads(r[13]),
                        "frontmatter": json.loads(r[14]),
                        "sha256": r[3],
                        "mtime_ns": r[2],
                        "status": r[4],
                        "error": r[15],
                        "kind": r[16],
                    },
                )
        return out

    def kinds_of(self, paths: Sequence[str]) -> dict[str, str]:
        """Each recorded note's kind (`records.NoteKind`), by path."""
        out: dict[str, str] = {}
        for batch in _batches(list(paths), 500):
            marks = ",".join("?" * len(batch))
            out.update(self._query(f"SELECT path, kind FROM notes WHERE path IN ({marks})", batch))
        return out

    def note_paths(self) -> list[str]:
        """Every note the index holds (a link resolves to any of them)."""
        return [r[0] for r in self._query("SELECT path FROM notes")]

    def paths_named(self, names: Iterable[str]) -> list[str]:
        """The notes whose file name (lower-cased, without ".md") is one of `names`: every
        note a link to one of those names can resolve to. The index of names is kept until
        the next write."""
        writes = self._writes  # before the read: a write meanwhile makes the next call read
        seen, by_name = self._names
        if seen != writes:
            by_name = {}
            for path in self.note_paths():
                # Keyed as `LinkResolver` keys them, so the two find the same notes.
                by_name.setdefault(link_key(path).rsplit("/", 1)[-1], []).append(path)
            self._names = (writes, by_name)
        return [path for name in {n.lower() for n in names} for path in by_name.get(name, [])]

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

    def link_sources(self, name: str) -> list[str]:
        """The notes with a link whose target names `name` (lower-cased, without ".md"), as
        written or under a folder: every note that may link to a note of that name."""
        pattern = "%/" + name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = self._query(
            "SELECT DISTINCT source FROM note_links WHERE target = ? OR target LIKE ? ESCAPE '\\' "
            "ORDER BY source",
            (name, pattern),
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

    def vectors_of(
        self, model: str, paths: Iterable[str]
    ) -> dict[str, tuple[list[str], np.ndarray]]:
        """Each note's chunk ids in order and their vectors (one row each), for the chunks that
        have one; a note with none is left out."""
        ids: dict[str, list[str]] = {}
        rows: dict[str, list[bytes]] = {}
        for batch in _batches(sorted(set(paths)), 500):
            marks = ",".join("?" * len(batch))
            for path, chunk_id, blob in self._query(
                # CROSS JOIN keeps the chunks outermost: the planner would otherwise walk
                # every vector of the model (ten times slower on a big vault).
                "SELECT c.path, c.id, v.vector FROM chunks c "
                "CROSS JOIN vectors v ON v.model = ? AND v.hash = c.hash "
                f"WHERE c.path IN ({marks}) ORDER BY c.path, c.idx",
                [model, *batch],
            ):
                ids.setdefault(path, []).append(chunk_id)
                rows.setdefault(path, []).append(blob)
        return {
            path: (
                ids[path],
                np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), -1),
            )
            for path, blobs in rows.items()
        }

    def distinctive_words(
        self,
        passages: Sequence[Sequence[str]],
        held: Sequence[Sequence[str]],
        limit: int,
        max_share: float,
    ) -> list[str]:
        """The words that best tell a text from the rest of the index; `held` are the words
        of each chunk of its note (see `keyword.distinctive_words`)."""
        return keyword.distinctive_words(passages, held, self._chunks_with, limit, max_share)

    def _chunks_with(self, terms: Sequence[str]) -> tuple[dict[str, int], int]:
        """The chunks holding each term of the words index, and the chunks in all.

        Kept until the next write, and only terms looked up already: every related-notes
        request asks for a note's terms, and a common one costs a walk of its list of chunks.
        """
        writes = self._writes  # before the reads: a write meanwhile makes the next call read
        seen, counts, total = self._terms
        if seen != writes or len(counts) > self.TERMS_KEPT:
            counts, total = {}, self._query("SELECT count(*) FROM chunks")[0][0]
        new = [t for t in terms if t not in counts]
        if new:
            found = keyword.term_chunks(self._query, new)
            # In place: only lookups and len() ever read it, so other threads may share it.
            counts.update((t, found.get(t, 0)) for t in new)
        if self._terms[0] <= writes:  # a slower, older call does not undo a newer one
            self._terms = (writes, counts, total)
        return {t: counts[t] for t in terms if counts[t]}, total

    # -- chunks awaiting vectors ---------------------------------------------------------------

    def awaiting(
        self,
        model: str,
        limit: int,
        *,
        paths: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        hashes: Sequence[str] | None = None,
    ) -> list[StoredChunk]:
        """Chunks of indexed notes that `model` has no vector for, the most recently modified
        notes first (at most `limit`; only of `paths` when given, none of `exclude`; only
        with one of these texts' `hashes` when given)."""
        where, params = _awaiting_where(model, paths, exclude)
        if hashes is not None:
            where += " AND c.hash IN (SELECT value FROM json_each(?))"
            params.append(json.dumps(list(hashes)))
        rows = self._query(
            f"SELECT {', '.join('c.' + col for col in _CHUNK_COLUMNS.split(', '))} {where} "
            "ORDER BY n.mtime_ns DESC, c.path, c.idx LIMIT ?",
            [*params, limit],
        )
        return [_stored(r) for r in rows]

    def awaiting_totals(self, model: str, paths: Iterable[str] | None = None) -> Awaiting:
        """How much awaits vectors of `model`: chunks, their tokens and their notes.

        The whole index's totals are kept until the next write: status asks for them every
        second while a first index runs, and each is a scan of every chunk.
        """
        writes = self._writes  # before the read: a write meanwhile makes the next call read
        cached = self._totals.get(model)
        if paths is None and cached is not None and cached[0] == writes:
            return cached[1]
        where, params = _awaiting_where(model, paths, ())
        chunks, tokens, notes = self._query(
            f"SELECT COUNT(*), COALESCE(SUM(c.tokens), 0), COUNT(DISTINCT c.path) {where}",
            params,
        )[0]
        totals = Awaiting(chunks, tokens, notes)
        if paths is None:
            self._totals[model] = (writes, totals)
        return totals

    def awaiting_paths(
        self, model: str, paths: Iterable[str], *, any_status: bool = False
    ) -> set[str]:
        """Those of `paths` with a chunk awaiting vectors of `model`: not fully indexed yet;
        with `any_status`, failed and quarantined notes' chunks without vectors count too."""
        out: set[str] = set()
        for batch in _batches(sorted(set(paths)), 500):
            where, params = _awaiting_where(model, batch, (), any_status=any_status)
            out.update(r[0] for r in self._query(f"SELECT DISTINCT c.path {where}", params))
        return out

    def embedded_ids(self, model: str) -> list[str]:
        """Ids of the chunks `model` has vectors for: what the store should hold."""
        rows = self._query(
            "SELECT c.id FROM chunks c JOIN vectors v ON v.model = ? AND v.hash = c.hash",
            (model,),
        )
        return [r[0] for r in rows]

    def failed(self) -> list[tuple[str, str, int]]:
        return quarantine.failed(self._query)

    def quarantined(self) -> list[Quarantined]:
        return quarantine.quarantined(self._query)

    def left_out(self) -> list[LeftOut]:
        return quarantine.left_out(self._query)

    def counts(self, model: str | None = None) -> dict[str, int]:
        """Notes by status and chunks; with `model`, also what awaits its vectors: chunks
        ("awaiting") and notes not fully indexed ("notes" less "embedded")."""
        by_status = dict(self._query("SELECT status, COUNT(*) FROM notes GROUP BY status"))
        chunks = self._query("SELECT COUNT(*) FROM chunks")[0][0]
        extra: dict[str, int] = {}
        if model is not None:
            awaiting = self.awaiting_totals(model)
            extra = {
                "embedded": by_status.get("ok", 0) - awaiting.notes,
                "awaiting": awaiting.chunks,
            }
        return {
            **extra,
            "notes": by_status.get("ok", 0),
            "failed": by_status.get("failed", 0),
            "quarantined": by_status.get("quarantined", 0),
            "left_out": by_status.get("left_out", 0),
            "chunks": chunks,
        }

    def kind_counts(self) -> dict[str, dict[str, int]]:
        """Files by kind (`records.NoteKind`) and status: {"pdf": {"ok": 3, "left_out": 1}}.

        An indexed file's kind is the one it was indexed as; one not indexed (failed, left
        out) goes by its name, else by what it was last indexed as.
        """
        out: dict[str, dict[str, int]] = {}
        for path, kind, status in self._query("SELECT path, kind, status FROM notes"):
            if status != "ok":
                kind = kind_of(path) or kind
            counts = out.setdefault(kind, {})
            counts[status] = counts.get(status, 0) + 1
        return out

    def in_flight(self) -> list[str]:
        return [r[0] for r in self._query("SELECT path FROM in_flight ORDER BY path")]

    def suspects(self) -> dict[str, int]:
        """Notes in hand when a process died and not tried alone since: path -> crashes."""
        return quarantine.suspects(self._query)

    # -- writes --------------------------------------------------------------------------------

    def apply(
        self,
        outcomes: Sequence[NoteOutcome] = (),
        *,
        deleted: Sequence[str] = (),
        touched: Sequence[FileState] = (),
        quarantine_after: int = 0,
        done: Iterable[str] = (),
        suspects: Collection[str] = (),
    ) -> list[str]:
        """Record one batch of outcomes atomically; return the notes quarantined by it.

        `touched` is the stat, read under, of notes whose bytes did not change. A failed note
        keeps its last good chunks, and is quarantined once it has failed `quarantine_after`
        times (0: never) on the same content. A file left out keeps its last good chunks too
        (a path also in `deleted` loses them first). `done` are notes no longer in flight, and
        no longer suspects: each was recorded one way or another without killing the process;
        except those also in `suspects`, still to be tried alone by a later stage.
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
            db.executemany(
                "UPDATE notes SET size = ?, mtime_ns = ?, ctime_ns = ?, inode = ?, hashed_ns = ? "
                "WHERE path = ?",
                [(t.size, t.mtime_ns, t.ctime_ns, t.inode, t.hashed_ns, t.path) for t in touched],
            )
            for failed in (o for o in outcomes if isinstance(o, NoteFailed)):
                if quarantine.record_failure(db, failed, quarantine_after, now):
                    quarantined.append(failed.path)
            for left in (o for o in outcomes if isinstance(o, NoteLeftOut)):
                quarantine.record_left_out(db, left, now)
            for written in (o for o in outcomes if isinstance(o, NoteWritten)):
                self._write_note(db, written, now)
            finished = [(p,) for p in done]
            db.executemany("DELETE FROM in_flight WHERE path = ?", finished)
            db.executemany(
                "DELETE FROM suspects WHERE path = ?", [f for f in finished if f[0] not in suspects]
            )
        return quarantined

    # -- notes in hand, and what a crash leaves behind -----------------------------------------

    def add_vectors(
        self, model: str, vectors: Mapping[str, np.ndarray], done: Iterable[str] = ()
    ) -> None:
        """Record vectors of `model` by text hash; `done` as for `apply`."""
        with self._transaction() as db:
            db.executemany(
                "INSERT OR IGNORE INTO vectors(model, hash, vector) VALUES (?, ?, ?)",
                [(model, h, np.asarray(v, dtype=np.float32).tobytes()) for h, v in vectors.items()],
            )
            finished = [(p,) for p in done]
            db.executemany("DELETE FROM in_flight WHERE path = ?", finished)
            db.executemany("DELETE FROM suspects WHERE path = ?", finished)

    def rechunk(self, paths: Iterable[str] | None = None) -> int:
        """Make these indexed notes (all, with None) look changed, so that the next pass reads
        and chunks them again: after a switch of model, whose tokenizer cuts other chunks, or
        for chunks whose embedded text cannot be made again from what is stored. They stay
        searchable by their words meanwhile."""
        with self._transaction() as db:
            if paths is None:
                cursor = db.execute(
                    "UPDATE notes SET sha256 = '', mtime_ns = 0 WHERE status = 'ok'"
                )
                return int(cursor.rowcount)
            rows = [(p,) for p in paths]
            db.executemany(
                "UPDATE notes SET sha256 = '', mtime_ns = 0 WHERE path = ? AND status = 'ok'", rows
            )
            return len(rows)

    def mark_in_flight(self, path: str, size: int, mtime_ns: int, sha256: str) -> None:
        """Note that `path` is about to be parsed and embedded (cleared by `apply(done=...)`).

        Committed without an fsync: the row must outlive a crash of this process, not of the
        machine, and a page in the OS cache does. It costs one small write per note.
        """
        self.mark_in_flight_many([(path, size, mtime_ns, sha256)])

    def mark_in_flight_many(self, notes: Sequence[tuple[str, int, int, str]]) -> None:
        """`mark_in_flight` for each (path, size, mtime_ns, sha256), in one commit."""
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
        with self._transaction() as db:
            return quarantine.recover(db, quarantine_after)

    def clear_suspects(self) -> None:
        """After a complete full pass: every suspect still on disk was tried, or is unchanged
        since it was last recorded, and neither holds anything against it."""
        with self._transaction() as db:
            db.execute("DELETE FROM suspects")

    def release(self, paths: Iterable[str]) -> list[str]:
        """Give quarantined notes among `paths` one more try (they keep their attempt count,
        so one more failure quarantines them again)."""
        with self._transaction() as db:
            return quarantine.release(db, paths)

    def _write_note(self, db: sqlite3.Connection, w: NoteWritten, now: float) -> None:
        note = w.note
        db.execute("DELETE FROM chunks WHERE path = ?", (note.path,))
        db.executemany(
            "INSERT INTO chunks(id, path, idx, hash, title, section, headings, start_line, "
            "end_line, tokens, text, aliases, context, page, page_end, node, symbol) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                    c.context,
                    c.page,
                    c.page_end,
                    c.node,
                    c.symbol,
                )
                for c in w.chunks
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
        # Failures on this content still count: its vectors (the embedding phase's) may fail
        # again, and enough failures quarantine it.
        before = db.execute(
            "SELECT attempts FROM notes "
            "WHERE path = ? AND sha256 = ? AND status IN ('ok', 'failed')",
            (note.path, w.sha256),
        ).fetchone()
        db.execute(
            "INSERT OR REPLACE INTO notes(path, size, mtime_ns, sha256, status, error, attempts, "
            "title, aliases, tags, links, frontmatter, indexed_at, ctime_ns, inode, hashed_ns, "
            "kind) VALUES (?, ?, ?, ?, 'ok', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                note.path,
                w.state.size,
                w.state.mtime_ns,
                w.sha256,
                "; ".join(note.errors) or None,
                before[0] if before else 0,
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
                w.state.ctime_ns,
                w.state.inode,
                w.state.hashed_ns,
                note.kind,
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

    def forget_other_models(self, model: str) -> int:
        """Delete the vectors of every model but `model`; returns how many.

        `prune_vectors` keeps a vector whose text is still a chunk, whatever its model, so an
        old model's vectors would outlive a switch: this finishes one. Called after every
        complete full pass, it writes only when there is something to delete.
        """
        try:
            if not self._query("SELECT 1 FROM vectors WHERE model != ? LIMIT 1", (model,)):
                return 0
            with self._transaction() as db:
                return int(db.execute("DELETE FROM vectors WHERE model != ?", (model,)).rowcount)
        except StoreError as exc:
            raise StoreError(
                f"cannot drop other models' vectors from {self.path}: {exc.__cause__ or exc}"
            ) from exc

    # -- filters and keyword search ----------------------------------------------------------------

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
        """(chunk id, BM25 score; higher is better) for an FTS5 MATCH expression (see
        `keyword.bm25`)."""
        return keyword.bm25(
            self._query, match, limit, paths, weights=weights, index=index, require=require
        )

    def substring(
        self,
        terms: Sequence[str],
        limit: int,
        paths: Sequence[str] | None = None,
        *,
        weights: Sequence[float] = KEYWORD_WEIGHTS,
    ) -> list[tuple[str, float]]:
        """Chunks containing any of `terms` as a substring (see `keyword.substring`)."""
        return keyword.substring(self._query, terms, limit, paths, weights=weights)

    def marked(self, match: str, chunk_ids: Sequence[str], start: str, end: str) -> dict[str, str]:
        """Chunks' texts with the words `match` finds marked (see `keyword.marked`)."""
        return keyword.marked(self._query, match, chunk_ids, start, end)

    def tag_counts(self, prefix: str = "") -> list[tuple[str, int]]:
        """Every tag with the number of notes holding it (a nested tag counts for its parents
        too), most used first; with `prefix`, only that tag and those below it."""
        sql = (
            "SELECT t.tag, COUNT(*) FROM note_tags t JOIN notes n ON n.path = t.path "
            f"WHERE n.status IN {_SEARCHABLE}"
        )
        params: list[Any] = []
        if prefix:
            sql += " AND (t.tag = ? OR substr(t.tag, 1, ?) = ?)"
            params += [prefix, len(prefix) + 1, prefix + "/"]
        sql += " GROUP BY t.tag ORDER BY COUNT(*) DESC, t.tag"
        return [(r[0], int(r[1])) for r in self._query(sql, params)]

    def recent(self, limit: int, since_ns: int | None = None) -> list[dict[str, Any]]:
        """The most recently modified notes, newest first: path, title, mtime_ns and tags."""
        sql = f"SELECT path, title, mtime_ns, tags FROM notes WHERE status IN {_SEARCHABLE}"
        params: list[Any] = []
        if since_ns is not None:
            sql += " AND mtime_ns >= ?"
            params.append(since_ns)
        sql += " ORDER BY mtime_ns DESC, path LIMIT ?"
        params.append(limit)
        return [
            {"path": r[0], "title": r[1] or "", "mtime_ns": r[2], "tags": json.loads(r[3] or "[]")}
            for r in self._query(sql, params)
        ]

    def paths_matching(
        self,
        tags: Sequence[str] = (),
        path_prefix: str = "",
        *,
        tags_any: Sequence[str] = (),
        conditions: Sequence[Condition] = (),
        modified_since_ns: int | None = None,
        kinds: Sequence[str] = (),
    ) -> list[str] | None:
        """Notes passing every filter, or None when there is no filter.

        `tags` must all be present and one of `tags_any` must be (nested tags match their
        parents); `conditions` test frontmatter fields (see `Condition`); `modified_since_ns`
        compares with the file's mtime; `kinds` keeps the files indexed as one of them.
        """
        if not (
            tags or path_prefix or tags_any or conditions or kinds or modified_since_ns is not None
        ):
            return None
        # Failed, quarantined and left-out notes keep their last good chunks, and filters find
        # them too.
        sql = f"SELECT path FROM notes WHERE status IN {_SEARCHABLE}"
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
        if kinds:
            sql += " AND kind IN (SELECT value FROM json_each(?))"
            params.append(json.dumps(list(kinds)))
        for condition in conditions:
            clause, more = condition_sql(condition)
            sql += f" AND {clause}"
            params.extend(more)
        return [r[0] for r in self._query(sql + " ORDER BY path", params)]


_CHUNK_COLUMNS = (
    "id, path, idx, hash, title, section, headings, start_line, end_line, tokens, text, context, "
    "page, page_end, node, symbol"
)


#: More notes than this named at once (a checkout of another branch) select every chunk
#: awaiting: their list would pass SQLite's limit on parameters.
_MAX_PATHS = 20_000


@dataclass(frozen=True, slots=True)
class Awaiting:
    """What awaits vectors: chunks, their tokens, and the notes they belong to."""

    chunks: int
    tokens: int
    notes: int


#: The notes whose chunks search finds: failed, quarantined and left-out notes keep their last
#: good ones.
_SEARCHABLE = "('ok', 'failed', 'quarantined', 'left_out')"


def _awaiting_where(
    model: str, paths: Iterable[str] | None, exclude: Iterable[str], *, any_status: bool = False
) -> tuple[str, list[Any]]:
    """FROM and WHERE of the chunks awaiting vectors of `model`, with their parameters.

    A chunk awaits while no vector of the model is stored for its text. Only notes recorded as
    indexed count ('ok', and not marked for chunking again by `rechunk`): a failed note keeps
    its chunks searchable by their words and is retried when it changes.
    """
    sql = (
        "FROM chunks c JOIN notes n ON n.path = c.path WHERE "
        + ("" if any_status else "n.status = 'ok' AND n.sha256 != '' AND ")
        + "NOT EXISTS (SELECT 1 FROM vectors v WHERE v.model = ? AND v.hash = c.hash)"
    )
    params: list[Any] = [model]
    if paths is not None and len(wanted := sorted(set(paths))) <= _MAX_PATHS:
        sql += f" AND c.path IN ({','.join('?' * len(wanted))})" if wanted else " AND 0"
        params += wanted
    left = sorted(set(exclude))
    if left:
        sql += f" AND c.path NOT IN ({','.join('?' * len(left))})"
        params += left
    return sql, params


_KNOWN_COLUMNS = (
    "path, size, mtime_ns, sha256, status, attempts, ctime_ns, inode, hashed_ns, left_out"
)


def _known(row: Sequence[Any]) -> KnownNote:
    path, size, mtime_ns, sha256, status, attempts, ctime_ns, inode, hashed_ns, left_out = row
    return KnownNote(
        path,
        size,
        mtime_ns,
        sha256,
        status == "ok",
        attempts,
        quarantined=status == "quarantined",
        ctime_ns=ctime_ns,
        inode=inode,
        hashed_ns=hashed_ns,
        left_out=(left_out or "") if status == "left_out" else "",
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
        context=row[11],
        page=row[12],
        page_end=row[13],
        node=row[14],
        symbol=row[15],
    )


def _batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
