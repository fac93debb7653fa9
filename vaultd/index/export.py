"""Every chunk record in the store, sorted by id: what `vaultd export` prints.

Read from Chroma itself, not the manifest, so an export shows what the store really holds,
less the files `[mcp] exclude` keeps from AI tools: an export is how the index's text leaves
for other programs, so it is given what an assistant is given, no more.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from vaultd.index.exclusion import Exclusion
from vaultd.storage.vectors import VectorStore

PAGE = 1000


def export_records(
    store: VectorStore, *, with_vectors: bool = False, exclusion: Exclusion | None = None
) -> Iterator[dict[str, Any]]:
    """The records, those of files `exclusion` names left out."""
    ids = sorted(store.ids())
    for start in range(0, len(ids), PAGE):
        batch = ids[start : start + PAGE]
        records = store.get(batch, with_vectors=with_vectors)
        for chunk_id in batch:
            record = records[chunk_id]
            meta = record["metadata"]
            if exclusion is not None and exclusion.excludes(
                str(meta.get("path", "")), meta.get("tags") or (), meta.get("kind")
            ):
                continue
            line: dict[str, Any] = {
                "id": chunk_id,
                "document": record["document"],
                "metadata": record["metadata"],
            }
            if with_vectors:
                line["vector"] = [round(float(x), 7) for x in record["vector"]]
            yield line
