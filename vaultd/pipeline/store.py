"""The vector store: one Chroma collection per vault and model, embedded or on a server.

Chroma is treated as a cache of vaultd's manifest: every write is an idempotent upsert or
delete by deterministic chunk id, so replaying a batch after a crash is harmless. chromadb's
exceptions are translated into `StoreError` here and nowhere else.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vaultd.errors import StoreError, StoreMismatchError

#: Chroma's own loggers are chatty at INFO about telemetry and migrations.
logging.getLogger("chromadb").setLevel(logging.WARNING)

Metadata = Mapping[str, str | int | float | bool | list[str]]
#: Upserts are sent in slices of this many records (Chroma caps a request's size).
WRITE_BATCH = 1000


def collection_name(vault: Path, model_id: str) -> str:
    """A valid, stable Chroma collection name for one vault and model."""
    slug = re.sub(r"[^a-zA-Z0-9._-]+", "-", vault.name).strip("-._")[:40] or "vault"
    digest = hashlib.sha256(f"{vault}\x00{model_id}".encode()).hexdigest()[:10]
    return f"vaultd-{slug}-{digest}"


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
    ) -> None:
        self.location = url or str(path)
        try:
            import chromadb
            from chromadb.config import Settings

            settings = Settings(anonymized_telemetry=False, allow_reset=False)
            if url:
                from urllib.parse import urlparse

                parsed = urlparse(url)
                headers = {"Authorization": f"Bearer {token}"} if token else None
                self._client: Any = chromadb.HttpClient(
                    host=parsed.hostname or "localhost",
                    port=parsed.port or (443 if parsed.scheme == "https" else 8000),
                    ssl=parsed.scheme == "https",
                    headers=headers,
                    settings=settings,
                )
            else:
                assert path is not None
                path.mkdir(parents=True, exist_ok=True)
                self._client = chromadb.PersistentClient(path=str(path), settings=settings)
            self._collection = self._client.get_or_create_collection(
                collection,
                metadata={
                    "hnsw:space": "cosine",
                    "vaultd:vault": vault_id,
                    "vaultd:model": model_id,
                },
                embedding_function=None,
            )
        except StoreError:
            raise
        except Exception as exc:
            raise StoreError(
                f"cannot open the Chroma collection at {self.location}: {exc}"
            ) from exc
        meta = self._collection.metadata or {}
        for key, expected in (("vaultd:vault", vault_id), ("vaultd:model", model_id)):
            if meta.get(key) not in (None, expected):
                raise StoreMismatchError(
                    f"collection {collection!r} at {self.location} belongs to {key.split(':')[1]} "
                    f"{meta.get(key)!r}, not {expected!r}; choose another [store] collection"
                )

    def upsert(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        documents: Sequence[str],
        metadatas: Sequence[Metadata],
    ) -> None:
        for start in range(0, len(ids), WRITE_BATCH):
            end = start + WRITE_BATCH
            try:
                self._collection.upsert(
                    ids=list(ids[start:end]),
                    embeddings=np.asarray(vectors[start:end], dtype=np.float32),
                    documents=list(documents[start:end]),
                    metadatas=[dict(m) for m in metadatas[start:end]],
                )
            except Exception as exc:
                raise StoreError(f"Chroma refused an upsert at {self.location}: {exc}") from exc

    def delete(self, ids: Sequence[str]) -> None:
        for start in range(0, len(ids), WRITE_BATCH):
            try:
                self._collection.delete(ids=list(ids[start : start + WRITE_BATCH]))
            except Exception as exc:
                raise StoreError(f"Chroma refused a delete at {self.location}: {exc}") from exc

    def ids(self) -> set[str]:
        """Every id in the collection, read in pages."""
        out: set[str] = set()
        offset = 0
        page = 5000
        try:
            while True:
                got = self._collection.get(include=[], limit=page, offset=offset)["ids"]
                out.update(got)
                if len(got) < page:
                    return out
                offset += page
        except Exception as exc:
            raise StoreError(f"cannot list Chroma ids at {self.location}: {exc}") from exc

    def get(self, ids: Sequence[str], *, with_vectors: bool = False) -> dict[str, dict[str, Any]]:
        include = ["documents", "metadatas"] + (["embeddings"] if with_vectors else [])
        out: dict[str, dict[str, Any]] = {}
        try:
            for start in range(0, len(ids), WRITE_BATCH):
                got = self._collection.get(
                    ids=list(ids[start : start + WRITE_BATCH]), include=include
                )
                embeddings = got.get("embeddings")
                for i, chunk_id in enumerate(got["ids"]):
                    record: dict[str, Any] = {
                        "document": got["documents"][i],
                        "metadata": got["metadatas"][i],
                    }
                    if with_vectors and embeddings is not None:
                        record["vector"] = np.asarray(embeddings[i], dtype=np.float32)
                    out[chunk_id] = record
        except Exception as exc:
            raise StoreError(f"cannot read from Chroma at {self.location}: {exc}") from exc
        return out

    def count(self) -> int:
        try:
            return int(self._collection.count())
        except Exception as exc:
            raise StoreError(f"cannot count Chroma records at {self.location}: {exc}") from exc

    def query(
        self, vector: np.ndarray, k: int, where: Mapping[str, Any] | None = None
    ) -> list[tuple[str, float]]:
        """(chunk id, cosine similarity) of the `k` nearest chunks."""
        if k <= 0:
            return []
        try:
            got = self._collection.query(
                query_embeddings=[np.asarray(vector, dtype=np.float32)],
                n_results=k,
                where=dict(where) if where else None,
                include=["distances"],
            )
        except Exception as exc:
            raise StoreError(f"Chroma query failed at {self.location}: {exc}") from exc
        ids = got["ids"][0] if got["ids"] else []
        distances = got["distances"][0] if got.get("distances") else []
        return [(i, 1.0 - float(d)) for i, d in zip(ids, distances, strict=False)]
