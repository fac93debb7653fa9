"""The manifest, vaultd's own database and the source of truth for what is indexed; the only code
that writes it.

One SQLite file in the data directory (WAL, synchronous=FULL) holds, per note, what was seen on
disk (size, mtime, SHA-256) and what was made of it (chunks, status), every vector by the hash
of the text it embeds, and the keyword index (FTS5, BM25) over the same chunks. Chroma is a
cache that can be rebuilt from this file at any time, so the manifest only advances after
Chroma has accepted a write.

`Manifest` is a unit of work over the file, as mopidy's core is over its parts: it opens the
file (`connection`: its connections, lock and transactions), keeps its meta, and decides what
runs in one transaction (`apply`, `add_vectors`); each concern is a controller over the same
connection, named for it and the one writer of its tables:
- `notes` (`notes.NotesController`): the notes and their chunks;
- `links` (`links.LinksController`): the links between notes;
- `filters` (`filters.FiltersController`): the tags, and the notes passing a search's filters;
- `vectors` (`embeddings.VectorsController`): the vectors by text hash, and the chunks
  awaiting one;
- `keyword` (`keyword.KeywordController`): BM25 and substring search, and the vocabulary;
- `failures` (`quarantine.FailuresController`): failed, quarantined and left-out notes, and the
  notes in hand when a process dies.
Below them `schema` (the tables, the schema version and the migrations) and `conditions`
(frontmatter conditions compiled to SQL). `view` reads the file for doctor without the
manifest, never writing it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from vaultd.layout import MANIFEST
from vaultd.records import FileState, NoteFailed, NoteLeftOut, NoteOutcome, NoteWritten
from vaultd.storage.connection import Connection
from vaultd.storage.embeddings import Awaiting, VectorsController
from vaultd.storage.filters import FiltersController, tag_ancestors
from vaultd.storage.keyword import KeywordController
from vaultd.storage.links import LinksController, link_key
from vaultd.storage.notes import NoteRecord, NotesController
from vaultd.storage.quarantine import FailuresController


class Manifest(Connection):
    """The SQLite manifest: one controller per concern, what runs in one transaction across
    them, and the meta (see `Connection` for the connections)."""

    def __init__(self, data_dir: Path, *, quarantine_after: int = 0) -> None:
        """`quarantine_after`: failures on the same content after which a note is
        quarantined (0: never)."""
        super().__init__(data_dir / MANIFEST)
        self.notes = NotesController(self)
        self.links = LinksController(self, notes=self.notes)
        self.filters = FiltersController(self)
        self.vectors = VectorsController(self)
        self.keyword = KeywordController(self)
        self.failures = FailuresController(self, quarantine_after)
        #: The counts by model (None: without one) as of a count of writes.
        self._counts: dict[str | None, tuple[int, dict[str, int]]] = {}

    def get_meta(self, key: str) -> str | None:
        rows = self.query("SELECT value FROM meta WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    def apply(
        self,
        outcomes: Sequence[NoteOutcome] = (),
        *,
        deleted: Sequence[str] = (),
        touched: Sequence[FileState] = (),
        done: Iterable[str] = (),
    ) -> list[str]:
        """Record one batch of outcomes atomically; return the notes quarantined by it.

        `touched` is the stat, read under, of notes whose bytes did not change. A failed note
        keeps its last good chunks, and is quarantined once it has failed `quarantine_after`
        times on the same content. A file left out keeps its last good chunks too (a path also
        in `deleted` loses them first). `done` are notes no longer in flight, and no longer
        suspects: each was recorded one way or another without killing the process; except
        this process's suspects (`failures.suspects`), still to be tried alone by the
        embedding phase.
        """
        now = time.time()
        quarantined: list[str] = []
        with self.transaction():
            for path in deleted:
                self.notes.delete(path)
                self.filters.delete_tags(path)
                self.links.delete(path)
                self.failures.forget(path)
            self.notes.touch(touched)
            for failed in (o for o in outcomes if isinstance(o, NoteFailed)):
                if self.failures.record_failure(failed, now):
                    quarantined.append(failed.path)
            for left in (o for o in outcomes if isinstance(o, NoteLeftOut)):
                self.failures.record_left_out(left, now)
            for written in (o for o in outcomes if isinstance(o, NoteWritten)):
                self.notes.write(written, now)
                self.links.write(written.path, written.note.links)
                self.filters.write_tags(written.path, written.note.tags)
            self.failures.finish(done, self.failures.suspects)
        return quarantined

    def add_vectors(
        self, model: str, vectors: Mapping[str, np.ndarray], done: Iterable[str] = ()
    ) -> None:
        """Record vectors of `model` by text hash, and `done` as for `apply`, in one commit."""
        with self.transaction():
            self.vectors.add(model, vectors)
            self.failures.finish(done)

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
            by_status, chunks = self.notes.status_counts()
            awaiting = None if model is None else self.vectors.awaiting_totals(model)
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


__all__ = [
    "Awaiting",
    "Manifest",
    "NoteRecord",
    "link_key",
    "tag_ancestors",
]
