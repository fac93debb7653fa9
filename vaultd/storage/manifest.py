"""The manifest, vaultd's own database and the source of truth for what is indexed; the only code
that writes it.

One SQLite file in the data directory (WAL, synchronous=FULL) holds, per note, what was seen on
disk (size, mtime, SHA-256) and what was made of it (chunks, status), every vector by the hash
of the text it embeds, and the keyword index (FTS5, BM25) over the same chunks. Chroma is a
cache that can be rebuilt from this file at any time, so the manifest only advances after
Chroma has accepted a write.

`Manifest` is the face every caller uses: it decides what runs in one transaction, and keeps
its snapshots until the next write. The rest is in modules it uses, none importing this
one; each table has one owner:
- `schema`: the tables, the schema version and the migrations (the bottom);
- `connection`: the file opened, its connections, the lock and the transactions;
- `notes`: the notes and their chunks;
- `links`: the links between notes; `filters`: the tags and the filters search applies;
- `embeddings`: the vectors by text hash, and the chunks awaiting one;
- `quarantine`: the crash-and-quarantine policy (in flight, suspects, attempts, left-out
  files);
- `keyword`: BM25 and substring search over the chunks;
- `conditions`: frontmatter conditions compiled to SQL.
`view` reads the file for doctor without the manifest, never writing it.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vaultd.answers import LeftOut, Quarantined
from vaultd.errors import StoreError
from vaultd.layout import MANIFEST
from vaultd.query import Condition
from vaultd.records import FileState, KnownNote, NoteFailed, NoteLeftOut, NoteOutcome, NoteWritten
from vaultd.storage import embeddings, filters, keyword, links, notes, quarantine
from vaultd.storage.connection import Connection
from vaultd.storage.embeddings import Awaiting
from vaultd.storage.filters import tag_ancestors
from vaultd.storage.keyword import KEYWORD_WEIGHTS, KeywordIndex
from vaultd.storage.links import link_key
from vaultd.storage.notes import NoteRecord, StoredChunk


class Manifest(Connection):
    """The SQLite manifest: what runs in one transaction, and the snapshots kept until the
    next write (see `Connection` for the connections)."""

    #: Terms whose chunk counts are kept at most (a few MB).
    TERMS_KEPT = 100_000

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir / MANIFEST)
        #: The counts by model (None: without one) as of a count of writes.
        self._counts: dict[str | None, tuple[int, dict[str, int]]] = {}
        #: As of a count of writes: the words index's chunk counts of the terms looked up and
        #: its chunks in all, and the notes by file name.
        self._terms: tuple[int, dict[str, int], int] = (-1, {}, 0)
        self._names: tuple[int, dict[str, list[str]]] = (-1, {})

    # -- meta ----------------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        rows = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    def set_meta(self, key: str, value: str) -> None:
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    # -- notes and chunks (`notes`) ------------------------------------------------------------

    def known(self) -> dict[str, KnownNote]:
        return notes.known(self._query)

    def known_subset(self, paths: Iterable[str], dirs: Iterable[str]) -> dict[str, KnownNote]:
        return notes.known_subset(self._query, paths, dirs)

    def records(self, paths: Iterable[str]) -> dict[str, NoteRecord]:
        return notes.records(self._query, paths)

    def note_row(self, path: str) -> dict[str, Any] | None:
        record = self.records([path]).get(path)
        return None if record is None else record.row

    def chunk_ids(self, path: str | None = None) -> list[str]:
        return notes.chunk_ids(self._query, path)

    def chunks_of(self, path: str) -> list[StoredChunk]:
        return notes.chunks_of(self._query, path)

    def chunks_by_id(self, ids: Sequence[str]) -> dict[str, StoredChunk]:
        return notes.chunks_by_id(self._query, ids)

    def first_chunk_ids(self, ids: Sequence[str]) -> set[str]:
        return notes.first_chunk_ids(self._query, ids)

    def chunk_counts(self, paths: Sequence[str]) -> dict[str, int]:
        return notes.chunk_counts(self._query, paths)

    def paths_of_chunks(self, ids: Sequence[str]) -> dict[str, str]:
        return notes.paths_of_chunks(self._query, ids)

    def tags_of(self, paths: Sequence[str]) -> dict[str, tuple[str, ...]]:
        return notes.tags_of(self._query, paths)

    def kinds_of(self, paths: Sequence[str]) -> dict[str, str]:
        return notes.kinds_of(self._query, paths)

    def packages_of(self, paths: Sequence[str]) -> dict[str, str]:
        return notes.packages_of(self._query, paths)

    def code_packages(self, folders: Iterable[str] | None = None) -> dict[str, str | None]:
        return notes.code_packages(self._query, folders)

    def set_packages(self, packages: Mapping[str, str | None]) -> None:
        """Give these notes their package (path -> package); nothing else of them changes."""
        with self._transaction() as db:
            notes.set_packages(db, packages.items())

    def note_paths(self) -> list[str]:
        return notes.note_paths(self._query)

    def kind_counts(self) -> dict[str, dict[str, int]]:
        return notes.kind_counts(self._query)

    def counts(self, model: str | None = None) -> dict[str, int]:
        """Notes by status and chunks; with `model`, also what awaits its vectors: chunks
        ("awaiting") and notes not fully indexed ("notes" less "embedded").

        Read in one snapshot (the caller's, if it is in one): a batch recorded between two
        reads counted its notes as awaiting and not yet as notes (status read "-100 of 0 notes
        embedded"). Kept until the next write: status asks every second while a first index
        runs, and what awaits is a scan of every chunk. What is kept answers only a snapshot
        of the commit it was read in, or status would count a note twice.
        """
        with self.snapshot():
            held = self.held()
            cached = self._counts.get(model)
            if held is not None and cached is not None and cached[0] == held:
                return dict(cached[1])
            by_status, chunks = notes.counts(self._query)
            awaiting = None if model is None else embeddings.awaiting_totals(self._query, model)
        extra: dict[str, int] = {}
        if awaiting is not None:
            extra = {
                "embedded": by_status.get("ok", 0) - awaiting.notes,
                "awaiting": awaiting.chunks,
            }
        found = {
            **extra,
            "notes": by_status.get("ok", 0),
            "failed": by_status.get("failed", 0),
            "quarantined": by_status.get("quarantined", 0),
            "left_out": by_status.get("left_out", 0),
            "chunks": chunks,
        }
        if held is not None:
            self._counts[model] = (held, found)
        return dict(found)

    # -- links (`links`) -------------------------------------------------------------------------

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
        return links.backlinks(self._query, path, aliases)

    def link_sources(self, name: str) -> list[str]:
        return links.link_sources(self._query, name)

    # -- vectors, and the chunks awaiting them (`embeddings`) ------------------------------------

    def vectors(self, model: str, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        return embeddings.vectors(self._query, model, hashes)

    def vectors_of(
        self, model: str, paths: Iterable[str]
    ) -> dict[str, tuple[list[str], np.ndarray]]:
        return embeddings.vectors_of(self._query, model, paths)

    def embedded_ids(self, model: str) -> list[str]:
        return embeddings.embedded_ids(self._query, model)

    def awaiting(
        self,
        model: str,
        limit: int,
        *,
        paths: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        hashes: Sequence[str] | None = None,
    ) -> list[StoredChunk]:
        return embeddings.awaiting(
            self._query, model, limit, paths=paths, exclude=exclude, hashes=hashes
        )

    def awaiting_totals(self, model: str, paths: Iterable[str] | None = None) -> Awaiting:
        """How much awaits vectors of `model`: chunks, their tokens and their notes."""
        return embeddings.awaiting_totals(self._query, model, paths)

    def awaiting_paths(
        self, model: str, paths: Iterable[str], *, any_status: bool = False
    ) -> set[str]:
        return embeddings.awaiting_paths(self._query, model, paths, any_status=any_status)

    def add_vectors(
        self, model: str, vectors: Mapping[str, np.ndarray], done: Iterable[str] = ()
    ) -> None:
        """Record vectors of `model` by text hash; `done` as for `apply`."""
        with self._transaction() as db:
            embeddings.add(db, model, vectors)
            quarantine.finish(db, done)

    def prune_vectors(self, model: str) -> int:
        """Forget vectors no chunk uses any more; run after a whole pass, not mid-way."""
        with self._transaction() as db:
            return embeddings.prune(db, model)

    def forget_other_models(self, model: str) -> int:
        """Delete the vectors of every model but `model`; returns how many.

        `prune_vectors` keeps a vector whose text is still a chunk, whatever its model, so an
        old model's vectors would outlive a switch: this finishes one. Called after every
        complete full pass, it writes only when there is something to delete.
        """
        try:
            if not embeddings.has_other_models(self._query, model):
                return 0
            with self._transaction() as db:
                return embeddings.forget_other_models(db, model)
        except StoreError as exc:
            raise StoreError(
                f"cannot drop other models' vectors from {self.path}: {exc.__cause__ or exc}"
            ) from exc

    # -- failures, left-out files, notes in hand and suspects (`quarantine`) --------------------

    def failed(self) -> list[tuple[str, str, int]]:
        return quarantine.failed(self._query)

    def quarantined(self) -> list[Quarantined]:
        return quarantine.quarantined(self._query)

    def left_out(self) -> list[LeftOut]:
        return quarantine.left_out(self._query)

    def in_part(self) -> list[tuple[str, str]]:
        return quarantine.in_part(self._query)

    def in_flight(self) -> list[str]:
        return quarantine.in_flight(self._query)

    def suspects(self) -> dict[str, int]:
        """Notes in hand when a process died and not tried alone since: path -> crashes."""
        return quarantine.suspects(self._query)

    def mark_in_flight_many(self, notes: Sequence[tuple[str, int, int, str]]) -> None:
        """Note that each (path, size, mtime_ns, sha256) is about to be parsed and embedded
        (cleared by `apply(done=...)`), in one commit.

        Committed without an fsync: the row must outlive a crash of this process, not of the
        machine, and a page in the OS cache does. It costs one small write per commit.
        """
        now = time.time()
        with self._unsynced_transaction() as db:
            quarantine.hold(db, notes, now)

    def clear_in_flight(self, paths: Iterable[str]) -> None:
        """Forget notes abandoned without a crash (a graceful stop, an error raised)."""
        with self._unsynced_transaction() as db:
            quarantine.clear_in_flight(db, paths)

    def recover_in_flight(self, quarantine_after: int) -> list[tuple[str, int, bool, bool]]:
        """Count one crash against every note the last process died holding (see
        `quarantine.recover`): (path, crashes, failed, quarantined) for each."""
        with self._transaction() as db:
            return quarantine.recover(db, quarantine_after)

    def clear_suspects(self) -> None:
        """After a complete full pass: every suspect still on disk was tried, or is unchanged
        since it was last recorded, and neither holds anything against it."""
        with self._transaction() as db:
            quarantine.clear_suspects(db)

    def release(self, paths: Iterable[str]) -> list[str]:
        """Give quarantined notes among `paths` one more try (they keep their attempt count,
        so one more failure quarantines them again)."""
        with self._transaction() as db:
            return quarantine.release(db, paths)

    # -- a pass's outcomes ---------------------------------------------------------------------

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
                notes.delete(db, path)
                filters.delete_tags(db, path)
                links.delete(db, path)
                quarantine.forget(db, path)
            notes.touch(db, touched)
            for failed in (o for o in outcomes if isinstance(o, NoteFailed)):
                if quarantine.record_failure(db, failed, quarantine_after, now):
                    quarantined.append(failed.path)
            for left in (o for o in outcomes if isinstance(o, NoteLeftOut)):
                quarantine.record_left_out(db, left, now)
            for written in (o for o in outcomes if isinstance(o, NoteWritten)):
                notes.write(db, written, now)
                links.write(db, written.path, written.note.links)
                filters.write_tags(db, written.path, written.note.tags)
            quarantine.finish(db, done, suspects)
        return quarantined

    def rechunk(self, paths: Iterable[str] | None = None) -> int:
        """Make these indexed notes (all, with None) look changed, so that the next pass reads
        and chunks them again: after a switch of model, whose tokenizer cuts other chunks, or
        for chunks whose embedded text cannot be made again from what is stored. They stay
        searchable by their words meanwhile."""
        with self._transaction() as db:
            return notes.rechunk(db, paths)

    # -- keyword search and filters (`keyword`, `filters`) ---------------------------------------

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

    def tag_counts(self, prefix: str = "") -> list[tuple[str, int]]:
        return filters.tag_counts(self._query, prefix)

    def recent(self, limit: int, since_ns: int | None = None) -> list[dict[str, Any]]:
        return filters.recent(self._query, limit, since_ns)

    def paths_matching(
        self,
        tags: Sequence[str] = (),
        path_prefix: str = "",
        *,
        tags_any: Sequence[str] = (),
        conditions: Sequence[Condition] = (),
        modified_since_ns: int | None = None,
        kinds: Sequence[str] = (),
        packages: Sequence[str] = (),
    ) -> list[str] | None:
        return filters.paths_matching(
            self._query,
            tags,
            path_prefix,
            tags_any=tags_any,
            conditions=conditions,
            modified_since_ns=modified_since_ns,
            kinds=kinds,
            packages=packages,
        )


__all__ = [
    "Awaiting",
    "Manifest",
    "NoteRecord",
    "StoredChunk",
    "link_key",
    "tag_ancestors",
]
