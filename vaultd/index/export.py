"""Every chunk record in the store, sorted by id: what `vaultd export` prints.

Read from Chroma itself, not the manifest, so an export shows what the store really holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from vaultd.storage.vectors import VectorStore

PAGE = 1000


def export_records(store: VectorStore, *, with_vectors: bool = False) -> Iterator[dict[str, Any]]:
    ids = sorted(store.ids())
    for start in range(0, len(ids), PAGE):
        batch = ids[start : start + PAGE]
        records = store.get(batch, with_vectors=with_vectors)
        for chunk_id in batch:
            record = records[chunk_id]
            line: dict[str, Any] = {
                "id": chunk_id,
                "document": record["document"],
                "metadata": record["metadata"],
            }
            if with_vectors:
                line["vector"] = [round(float(x), 7) for x in record["vector"]]
            yield line
