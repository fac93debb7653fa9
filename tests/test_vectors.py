"""The vector store's searches: near enough to exact that two builds of one index agree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from vaultd.storage.vectors import SEARCH_EF, VectorStore

RECORDS = 3000
DIMENSIONS = 48
K = 100


def _unit(rows: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((rows, DIMENSIONS)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _recall(store: VectorStore, vectors: np.ndarray, queries: np.ndarray) -> float:
    found = 0
    for query in queries:
        exact = {str(i) for i in np.argsort(-(vectors @ query))[:K]}
        found += len(exact & {chunk_id for chunk_id, _ in store.query(query, K)})
    return found / (K * len(queries))


_OLDER = """
import sys, numpy as np, chromadb
path, vectors = sys.argv[1], np.load(sys.argv[2])
client = chromadb.PersistentClient(path=path)
collection = client.create_collection(
    "vaultd-vectors",
    metadata={"hnsw:space": "cosine", "vaultd:vault": "/v", "vaultd:model": "m"},
    embedding_function=None,
)
assert collection.configuration["hnsw"]["ef_search"] < int(sys.argv[3])
for start in range(0, len(vectors), 1000):
    rows = vectors[start : start + 1000]
    collection.add(ids=[str(start + i) for i in range(len(rows))], embeddings=rows)
"""


def _older_collection(path: Path, vectors: np.ndarray) -> None:
    """A collection as vaultd made them before it set the search breadth (Chroma's default),
    made by another process, as an older vaultd would have."""
    saved = path.parent / "vectors.npy"
    np.save(saved, vectors)
    command = [sys.executable, "-c", _OLDER, str(path), str(saved), str(SEARCH_EF)]
    subprocess.run(command, check=True, capture_output=True, timeout=120)


def test_an_older_collection_is_widened_and_finds_the_true_nearest(tmp_path: Path) -> None:
    vectors, queries = _unit(RECORDS, 1), _unit(30, 2)
    _older_collection(tmp_path / "chroma", vectors)
    store = VectorStore(
        collection="vaultd-vectors", vault_id="/v", model_id="m", path=tmp_path / "chroma"
    )
    try:
        assert _recall(store, vectors, queries) >= 0.995
    finally:
        store.close()


def test_a_new_collection_searches_as_widely(tmp_path: Path) -> None:
    vectors, queries = _unit(RECORDS, 3), _unit(30, 4)
    store = VectorStore(
        collection="vaultd-vectors", vault_id="/v", model_id="m", path=tmp_path / "chroma"
    )
    try:
        ids = [str(i) for i in range(RECORDS)]
        store.upsert(ids, vectors, [""] * RECORDS, [{"path": "a.md"}] * RECORDS)
        assert _recall(store, vectors, queries) >= 0.995
    finally:
        store.close()
