"""Exact search over a copy of a collection's vectors, kept here beside Chroma.

Chroma's HNSW graph (hnswlib, 16 neighbours, `ef_construction` 100) leaves some vectors with no
link to them: its pruning rule drops the links to a vector whose neighbours are nearer each
other than to it (one of many near copies, a note unlike the others), and later inserts and
updates rewire the lists that still held one. No search reaches such a vector, at any
`ef_search`: on obsidian-hub 2.4% of the passages are not returned even by a search for their
own vector (docs/benchmarks.md, "Vectors the graph cannot reach"). So up to `EXACT_LIMIT`
records vaultd searches a copy of the vectors itself, exactly, and Chroma stays the store;
above it, Chroma's graph answers.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import structlog

from vaultd.errors import StoreError

log = structlog.get_logger(__name__)

#: Up to this many records a collection is searched exactly from a copy of its vectors held
#: here; above it, by Chroma's graph (see the module's docstring). A query reads the whole
#: copy, 1.5 KB a record at 384 dimensions: 75 MB and about 8 ms on one core at the limit
#: (docs/benchmarks.md); obsidian-hub's 26,469 passages take 39 MB.
EXACT_LIMIT = 50_000
#: Vectors read per call when the copy is made.
EXACT_PAGE = 5000
#: Filters whose matching rows are kept between two writes.
MASKS_KEPT = 16


class ExactCopy:
    """The exact copy of one collection's vectors: made on the first search, kept in step by
    every write through the store, dropped with the client (`reset`)."""

    def __init__(self, space: str) -> None:
        #: The space a collection that does not name its own compares vectors in.
        self._space = space
        self._lock = threading.Lock()
        #: None when not made yet, or the collection is larger than EXACT_LIMIT.
        self._exact: ExactIndex | None = None
        self._tried = False
        #: The writes made while the copy is being read, replayed on it once it is read
        #: (whether the read saw them or not, the replay leaves what Chroma holds).
        self._pending: list[tuple[list[str], np.ndarray | None]] | None = None
        #: Counts the resets, so that a read begun before one is not kept after it.
        self._generation = 0
        #: The copy's rows matching a filter, by the filter, with the copy's version then.
        self._masks: dict[str, tuple[ExactIndex, int, np.ndarray]] = {}

    @property
    def ready(self) -> bool:
        """Whether searches are answered exactly (once the first has made the copy)."""
        return self._exact is not None

    def reset(self) -> None:
        """Drop the copy: the next search reads it afresh."""
        with self._lock:
            self._exact, self._tried, self._pending = None, False, None
            self._generation += 1

    def search(
        self, collection: Any, rows: np.ndarray, k: int, where: Mapping[str, Any] | None
    ) -> list[list[tuple[str, float]]] | None:
        """The `k` nearest of each row, exactly; None when there is no copy to search."""
        exact = self._of(collection)
        if exact is None:
            return None
        allowed = self._matching(collection, exact, where) if where else None
        return [exact.nearest(row, k, allowed) for row in rows]

    def _matching(self, collection: Any, exact: ExactIndex, where: Mapping[str, Any]) -> np.ndarray:
        """The copy's rows that match `where`. Chroma decides what matches its own filter
        language (vaultd does not mirror it); the answer serves until the next write, since a
        pair's route filter lists nearly every id of the vault on every search."""
        key = json.dumps(where, sort_keys=True, default=str)
        version = exact.version
        cached = self._masks.get(key)
        if cached is not None and cached[0] is exact and cached[1] == version:
            return cached[2]
        mask = exact.rows_of(collection.get(where=dict(where), include=[])["ids"])
        if len(self._masks) >= MASKS_KEPT:
            self._masks.clear()
        self._masks[key] = (exact, version, mask)
        return mask

    def _of(self, collection: Any) -> ExactIndex | None:
        """The exact copy, made on first use when the collection is small enough."""
        with self._lock:
            if self._exact is not None or self._tried:
                return self._exact
            self._tried = True
            if collection.count() > EXACT_LIMIT:
                return None
            self._pending = []
            generation = self._generation
        # Read outside the lock: searches meanwhile are Chroma's, writes are kept for replay.
        hnsw = (collection.configuration or {}).get("hnsw") or {}
        exact = ExactIndex(unit=hnsw.get("space", self._space) != "ip")
        offset = 0
        while True:
            got = collection.get(include=["embeddings"], limit=EXACT_PAGE, offset=offset)
            if not got["ids"]:
                break
            exact.put(list(got["ids"]), np.asarray(got["embeddings"], dtype=np.float32))
            offset += len(got["ids"])
        with self._lock:
            pending, self._pending = self._pending, None
            if pending is None or self._generation != generation:
                return None  # released or closed meanwhile: the next client reads afresh
            for ids, rows in pending:
                if rows is None:
                    exact.drop(ids)
                else:
                    exact.put(ids, rows)
            self._exact = exact
        return exact

    def written(self, ids: list[str], rows: np.ndarray | None) -> None:
        """Keep the exact copy in step with a write (`rows` None: a delete)."""
        with self._lock:
            exact = self._exact
            if exact is None:
                if self._pending is not None:
                    self._pending.append((list(ids), rows))
                return
            if rows is None:
                exact.drop(ids)
                return
            exact.put(ids, rows)
            if len(exact) > EXACT_LIMIT:
                log.info("the vector store outgrew exact search", records=len(exact))
                self._exact = None


class ExactIndex:
    """Vectors by id, searched by scoring every one (see the module's docstring)."""

    def __init__(self, *, unit: bool) -> None:
        #: Cosine compares directions: the rows and queries are scaled to unit length; a
        #: pair's dot product takes them as they are.
        self.unit = unit
        self._lock = threading.Lock()
        self._rows: dict[str, int] = {}
        self._ids: list[str] = []
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._live = np.zeros(0, dtype=bool)
        self._free: list[int] = []
        #: Counts the writes, so that what was derived from the rows knows when it is stale.
        self.version = 0

    def __len__(self) -> int:
        return len(self._rows)

    def _scaled(self, vectors: np.ndarray) -> np.ndarray:
        vectors = np.asarray(vectors, dtype=np.float32)
        if not self.unit:
            return vectors
        norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
        return vectors / np.where(norms > 0, norms, 1.0)

    def put(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        rows = self._scaled(np.atleast_2d(vectors))
        with self._lock:
            self.version += 1
            if self._matrix.shape[1] != rows.shape[1]:
                if self._rows:
                    raise StoreError(
                        f"vectors of {rows.shape[1]} dimensions among {self._matrix.shape[1]}"
                    )
                self._matrix = np.zeros((0, rows.shape[1]), dtype=np.float32)
            for chunk_id, row in zip(ids, rows, strict=True):
                at = self._rows.get(chunk_id)
                if at is None:
                    at = self._free.pop() if self._free else self._grow()
                    self._rows[chunk_id] = at
                    self._ids[at] = chunk_id
                self._matrix[at] = row
                self._live[at] = True

    def _grow(self) -> int:
        at = len(self._ids)
        if at == len(self._matrix):
            size = max(1024, 2 * at)
            matrix = np.zeros((size, self._matrix.shape[1]), dtype=np.float32)
            matrix[:at] = self._matrix[:at]
            live = np.zeros(size, dtype=bool)
            live[:at] = self._live[:at]
            self._matrix, self._live = matrix, live
        self._ids.append("")
        return at

    def drop(self, ids: Sequence[str]) -> None:
        with self._lock:
            self.version += 1
            for chunk_id in ids:
                at = self._rows.pop(chunk_id, None)
                if at is not None:
                    self._live[at] = False
                    self._free.append(at)

    def rows_of(self, ids: Sequence[str]) -> np.ndarray:
        """A mask of the rows holding `ids` (for `nearest`'s `allowed`)."""
        with self._lock:
            mask = np.zeros(len(self._ids), dtype=bool)
            mask[[self._rows[i] for i in ids if i in self._rows]] = True
            return mask

    def nearest(
        self, vector: np.ndarray, k: int, allowed: np.ndarray | None = None
    ) -> list[tuple[str, float]]:
        """(id, similarity) of the `k` nearest, best first; with `allowed` (from `rows_of`,
        since when no row was written), among those rows only."""
        query = self._scaled(vector.reshape(-1))
        with self._lock:
            used = len(self._ids)
            if not self._rows or query.shape[0] != self._matrix.shape[1]:
                return []
            scores = self._matrix[:used] @ query
            keep = self._live[:used]
            if allowed is not None:
                # Rows added since the mask was made are not in it, nor allowed.
                within = np.zeros(used, dtype=bool)
                within[: min(used, len(allowed))] = allowed[:used]
                keep = keep & within
            candidates = np.flatnonzero(keep)
            ids = self._ids
            if len(candidates) > k:
                part = np.argpartition(-scores[candidates], k - 1)[:k]
                candidates = candidates[part]
            best = candidates[np.argsort(-scores[candidates], kind="stable")]
            # Converted as whole arrays: a numpy scalar at a time was one part in twenty of a
            # hybrid search's Python work, which asks for 200 (the notes' first passages).
            return [(ids[i], s) for i, s in zip(best.tolist(), scores[best].tolist(), strict=True)]
