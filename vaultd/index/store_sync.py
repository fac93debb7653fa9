"""Keeping Chroma in step with the manifest.

Chroma is written first and the manifest second, so the store never holds a chunk the
manifest lacks; a crash in between is repaired from the manifest at the next pass (`sync`:
Chroma holds exactly the chunks with a stored vector).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import structlog

from vaultd.embedding.embedder import TextEmbedder
from vaultd.errors import StoreError
from vaultd.records import StoredChunk
from vaultd.storage.manifest import Manifest
from vaultd.storage.metadata import stored_metadata
from vaultd.storage.vectors import Metadata, VectorStore

log = structlog.get_logger(__name__)


class StoreSync:
    def __init__(self, manifest: Manifest, store: VectorStore, embedder: TextEmbedder) -> None:
        self.manifest = manifest
        self.store = store
        self.embedder = embedder

    def sync(self) -> int:
        """Repair the store from the manifest: add what it lacks, drop what it should not have.

        Returns how many records were repaired. Runs before every pass, so a crash between the
        store write and the manifest commit, or a lost store, converges.
        """
        in_store = self.store.ids()
        # Ids only: on a big vault reading every chunk's text was most of a restart. Chunks
        # awaiting vectors are not expected: the embedding phase publishes them.
        expected = set(self.manifest.vectors.embedded_ids(self.embedder.model_id))
        repaired = 0
        for ids in _slices(sorted(expected - in_store), 1000):
            repaired += self.restore(list(self.manifest.notes.chunks_by_id(ids).values()))
        extra = sorted(in_store - expected)
        if extra:
            self.store.delete(extra)
            repaired += len(extra)
        if repaired:
            log.warning("store repaired from the manifest", records=repaired)
        return repaired

    def restore(self, chunks: list[StoredChunk], mtimes: Mapping[str, int] | None = None) -> int:
        """Publish these recorded chunks to the store with their stored vectors; a chunk
        without one awaits the embedding phase. Returns how many were published."""
        model_id = self.embedder.model_id
        vectors = self.manifest.vectors.get(model_id, [c.chunk.hash for c in chunks])
        ready = [c for c in chunks if c.chunk.hash in vectors]
        notes = self.manifest.notes.records({c.path for c in ready})
        metadatas: list[Metadata] = []
        for c in ready:
            row = dict(notes[c.path].row) if c.path in notes else {}
            if mtimes and c.path in mtimes:
                row["mtime_ns"] = mtimes[c.path]
            metadata = stored_metadata(c, row, model_id)
            metadatas.append({**metadata, **self.embedder.passage_metadata(vectors[c.chunk.hash])})
        if ready:
            self.store.upsert(
                [c.chunk.id for c in ready],
                np.vstack([vectors[c.chunk.hash] for c in ready]),
                [c.chunk.text for c in ready],
                metadatas,
            )
        return len(ready)

    def put_back(self, ids: Sequence[str], paths: Sequence[str]) -> None:
        """Make the store hold what the manifest says of these notes again, after records of
        theirs (`ids`) were written but the manifest did not move."""
        if not paths:
            return
        try:
            self.store.delete(list(ids))
            for path in paths:
                self.restore(self.manifest.notes.chunks_of(path))
        except StoreError as exc:
            # Put right later: the manifest still has these notes as they were, so the next pass
            # finds them changed (or touched, if changed back) and writes their records again.
            log.warning("could not put the store back for these notes", error=str(exc))


def _slices(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
