"""Chunk records go to the store on a thread of their own while the model embeds the rest.

Writing to Chroma costs about a millisecond a record in Python, on one core. Done after a
batch's embedding, the other core waits through it; done as each run's vectors come out, it
shares the cores with the model instead (measured on obsidian-help: 2 s of a 38 s first index).

The manifest still advances only once the store took every record of a note; a long batch
checks, without waiting, which of its writes are done (`sent`, `landed`), so that the vectors
embedded so far are recorded every few seconds while the model goes on. A note whose records
were written but which then failed, or whose batch was given up, is put back as the manifest
has it (the indexer does that).

One writer serves an indexer for its life: chromadb's embedded client keeps a SQLite connection
for every thread that writes, so a thread per batch would leave one open per batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from vaultd.records import Record
from vaultd.storage.vectors import VectorStore

#: Records per write: big enough that Chroma's per-call costs vanish, small enough that the
#: writer keeps up with the model from the first runs on.
SLICE = 256


class Writer:
    """Upserts records in slices, in order, on one thread; `finish` waits for them all."""

    def __init__(
        self,
        store: VectorStore,
        describe: Callable[[np.ndarray], Mapping[str, Any]] = lambda vector: {},
    ) -> None:
        self.store = store
        #: What a record's vector adds to its metadata (`TextEmbedder.passage_metadata`).
        self.describe = describe
        self._thread: ThreadPoolExecutor | None = None
        self._records: list[Record] = []
        self._vectors: list[np.ndarray] = []
        self._writes: list[Future[None]] = []

    def add(self, record: Record, vector: np.ndarray) -> None:
        extra = self.describe(vector)
        if extra:
            record = Record(record.id, record.path, record.document, {**record.metadata, **extra})
        self._records.append(record)
        self._vectors.append(vector)
        if len(self._records) >= SLICE:
            self._send()

    def sent(self) -> int:
        """Send what is held; returns a mark that `landed` reports once it is all in the store."""
        self._send()
        return len(self._writes)

    def landed(self, mark: int) -> bool:
        """Whether every write up to `mark` (from `sent`, since the last `finish`) is done,
        without waiting; raises the first such write's error."""
        writes = self._writes[:mark]
        if not all(write.done() for write in writes):
            return False
        for write in writes:
            exc = write.exception()
            if exc is not None:
                raise exc
        return True

    def finish(self) -> None:
        """Write what is held and wait for every write; raises the first write's error."""
        self._send()
        writes, self._writes = self._writes, []
        error: BaseException | None = None
        for write in writes:
            exc = write.exception()
            if exc is not None and error is None:
                error = exc
        if error is not None:
            raise error

    def discard(self) -> None:
        """Drop what is held and wait for the writes in progress, whatever their outcome."""
        self._records, self._vectors = [], []
        writes, self._writes = self._writes, []
        for write in writes:
            write.exception()

    def close(self) -> None:
        self.discard()
        if self._thread is not None:
            self._thread.shutdown(wait=True)
            self._thread = None

    def _send(self) -> None:
        if not self._records:
            return
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="vaultd-writer")
        records, vectors = self._records, np.vstack(self._vectors)
        self._records, self._vectors = [], []
        self._writes.append(
            self._thread.submit(
                self.store.upsert,
                [r.id for r in records],
                vectors,
                [r.document for r in records],
                [r.metadata for r in records],
            )
        )
