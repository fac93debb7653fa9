"""The vector store: one Chroma collection per vault and model, embedded or on a server.

Chroma is treated as a cache of vaultd's manifest: every write is an idempotent upsert or
delete by deterministic chunk id, so replaying a batch after a crash is harmless. Reaching the
collection (retries, errors) is `chroma`'s; searching a copy of its vectors exactly, `exact`'s;
keeping its files from growing, `upkeep`'s.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vaultd.storage.chroma import WRITE_BATCH, Chroma
from vaultd.storage.exact import ExactCopy
from vaultd.storage.upkeep import Upkeep

Metadata = Mapping[str, str | int | float | bool | list[str]]
#: Ids read per call when listing a collection: about 8 MB of ids.
IDS_PAGE = 250_000
#: Upserts are sent in slices of at most WRITE_BATCH records and about this many bytes of
#: JSON: a Chroma server refuses bigger bodies ("Payload too large"), and a note with hundreds
#: of links repeats them in every chunk's metadata.
WRITE_BYTES = 4 * 1024 * 1024
#: Bytes of JSON per vector component (a float32 written out in decimal, with its comma).
_BYTES_PER_FLOAT = 14


class VectorStore:
    """One Chroma collection, embedded under `path` or on the server at `url`."""

    def __init__(
        self,
        *,
        collection: str,
        vault_id: str,
        model_id: str,
        path: Path | None = None,
        url: str = "",
        token: str = "",
        space: str = "cosine",
    ) -> None:
        self._copy = ExactCopy(space)
        self._chroma = Chroma(
            collection=collection,
            vault_id=vault_id,
            model_id=model_id,
            path=path,
            url=url,
            token=token,
            space=space,
            on_close=self._copy.reset,
        )
        self.location = self._chroma.location
        self.space = space
        self.remote = self._chroma.remote
        self.name = collection
        self.upkeep = Upkeep(self._chroma)

    def release(self, unused_for: float) -> bool:
        """Close an embedded store's client once no operation has run for `unused_for` seconds,
        giving back the memory Chroma holds for the collection: its whole HNSW index (447 MB
        for 221,814 vectors), which it loads on first use and keeps for the life of the client.
        The next operation reopens it (0.85 s for that index, 0.1 s for a small vault).
        True when it closed the client. A server's store holds nothing worth releasing here.
        """
        return self._chroma.release(unused_for)

    @property
    def loaded(self) -> bool:
        """Whether the client is open (an embedded store then holds its index in memory)."""
        return self._chroma.loaded

    def close(self) -> None:
        """Release the client. chromadb shares one system per path within a process; without
        this, a store reopened in the same process would see the old, cached one."""
        self._chroma.close()

    # -- operations ----------------------------------------------------------------------------

    def upsert(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        documents: Sequence[str],
        metadatas: Sequence[Metadata],
    ) -> None:
        dimensions = vectors.shape[1] if vectors.ndim > 1 else 0
        for batch in _write_slices(documents, metadatas, dimensions):

            def write(collection: Any, batch: slice = batch) -> None:
                rows = np.asarray(vectors[batch], dtype=np.float32)
                collection.upsert(
                    ids=list(ids[batch]),
                    embeddings=rows,
                    documents=list(documents[batch]),
                    metadatas=[dict(m) for m in metadatas[batch]],
                )
                self._copy.written(list(ids[batch]), rows)

            self._chroma.call("upsert into the collection", write)

    def delete(self, ids: Sequence[str]) -> None:
        for start in range(0, len(ids), WRITE_BATCH):
            batch = list(ids[start : start + WRITE_BATCH])

            def remove(collection: Any, batch: list[str] = batch) -> None:
                collection.delete(ids=batch)
                self._copy.written(batch, None)

            self._chroma.call("delete from the collection", remove)

    def ids(self) -> set[str]:
        """Every id in the collection, read in pages.

        Pages are large because each one costs a scan up to its offset: 222,000 ids took 9 s
        in pages of 5,000 and 1 s in one (a restart of a 50,000-note vault waits for this).
        """
        out: set[str] = set()
        offset = 0
        page = IDS_PAGE
        while True:

            def page_of(collection: Any, offset: int = offset) -> list[str]:
                return list(collection.get(include=[], limit=page, offset=offset)["ids"])

            got = self._chroma.call("list the ids in the collection", page_of)
            out.update(got)
            if len(got) < page:
                return out
            offset += page

    def get(self, ids: Sequence[str], *, with_vectors: bool = False) -> dict[str, dict[str, Any]]:
        include = ["documents", "metadatas"] + (["embeddings"] if with_vectors else [])
        out: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), WRITE_BATCH):
            batch = list(ids[start : start + WRITE_BATCH])

            def read(collection: Any, batch: list[str] = batch) -> Any:
                return collection.get(ids=batch, include=include)

            got = self._chroma.call("read from the collection", read)
            embeddings = got.get("embeddings")
            for i, chunk_id in enumerate(got["ids"]):
                record: dict[str, Any] = {
                    "document": got["documents"][i],
                    "metadata": got["metadatas"][i],
                }
                if with_vectors and embeddings is not None:
                    record["vector"] = np.asarray(embeddings[i], dtype=np.float32)
                out[chunk_id] = record
        return out

    def count(self) -> int:
        return int(self._chroma.call("count the records", lambda c: c.count()))

    def count_where(self, where: Mapping[str, Any]) -> int:
        """The records whose metadata matches `where` (Chroma counts only all of them: this
        lists the matching ids)."""

        def matching(collection: Any) -> int:
            return len(collection.get(where=dict(where), include=[])["ids"])

        return int(self._chroma.call("count the records", matching))

    def query(
        self, vector: np.ndarray, k: int, where: Mapping[str, Any] | None = None
    ) -> list[tuple[str, float]]:
        """(chunk id, similarity) of the `k` nearest chunks: cosine, or a pair's dot product."""
        if k <= 0:
            return []
        rows = np.asarray(vector, dtype=np.float32).reshape(1, -1)
        return self._chroma.call("query the collection", lambda c: self._search(c, rows, k, where))[
            0
        ]

    def query_many(
        self, vectors: np.ndarray, k: int, where: Mapping[str, Any] | None = None
    ) -> list[list[tuple[str, float]]]:
        """`query` for each row of `vectors`, in one call."""
        if k <= 0 or not len(vectors):
            return [[] for _ in range(len(vectors))]
        rows = np.asarray(vectors, dtype=np.float32)
        return self._chroma.call("query the collection", lambda c: self._search(c, rows, k, where))

    @property
    def exact(self) -> bool:
        """Whether searches are answered exactly (once the first has made the copy)."""
        return self._copy.ready

    def _search(
        self, collection: Any, rows: np.ndarray, k: int, where: Mapping[str, Any] | None
    ) -> list[list[tuple[str, float]]]:
        exact = self._copy.search(collection, rows, k, where)
        if exact is not None:
            return exact
        got = collection.query(
            query_embeddings=list(rows),
            n_results=k,
            where=dict(where) if where else None,
            include=["distances"],
        )
        return [
            [(i, 1.0 - float(d)) for i, d in zip(row_ids, row_d, strict=False)]
            for row_ids, row_d in zip(got["ids"] or [], got.get("distances") or [], strict=False)
        ]


def _write_slices(
    documents: Sequence[str], metadatas: Sequence[Metadata], dimensions: int
) -> Iterator[slice]:
    """Consecutive slices of at most WRITE_BATCH records and about WRITE_BYTES of JSON (a
    single bigger record goes alone)."""
    start, size = 0, 0
    for i, (document, metadata) in enumerate(zip(documents, metadatas, strict=True)):
        record = (
            len(document.encode("utf-8"))
            + len(json.dumps(metadata, ensure_ascii=False, default=str).encode("utf-8"))
            + dimensions * _BYTES_PER_FLOAT
            + 64
        )
        if i > start and (i - start >= WRITE_BATCH or size + record > WRITE_BYTES):
            yield slice(start, i)
            start, size = i, 0
        size += record
    if start < len(documents):
        yield slice(start, len(documents))
