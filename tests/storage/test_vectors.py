"""The vector store's searches: near enough to exact that two builds of one index agree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vaultd.storage import exact as exact_module
from vaultd.storage.chroma import SEARCH_EF
from vaultd.storage.vectors import VectorStore

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


def test_searches_are_exact_and_follow_every_write(tmp_path: Path) -> None:
    vectors = _unit(400, 5)
    ids = [str(i) for i in range(len(vectors))]
    paths = [{"path": "a.md" if i % 2 else "b.md"} for i in range(len(vectors))]
    store = VectorStore(collection="vaultd-exact", vault_id="/v", model_id="m", path=tmp_path)
    try:
        store.upsert(ids[:300], vectors[:300], [""] * 300, paths[:300])
        assert store.query(vectors[7], 1) == [("7", pytest.approx(1.0, abs=1e-5))]
        assert store.exact
        # Written after the copy was made: added, changed to new vectors, deleted.
        changed = _unit(10, 7)
        store.upsert(ids[300:], vectors[300:], [""] * 100, paths[300:])
        store.upsert(ids[10:20], changed, [""] * 10, paths[10:20])
        store.delete(ids[20:40])
        for i in range(300, 400, 7):
            assert store.query(vectors[i], 1)[0][0] == str(i)
        for j, vector in enumerate(changed):
            assert store.query(vector, 1)[0][0] == str(10 + j)
        found = {i for row in store.query_many(vectors, 5) for i, _ in row}
        assert not found & set(ids[20:40])
        only_b = store.query(vectors[1], 50, {"path": "b.md"})
        assert len(only_b) == 50 and all(int(i) % 2 == 0 for i, _ in only_b)
        # What matched a filter is asked again after a write.
        store.upsert(["extra"], vectors[1][None], [""], [{"path": "b.md"}])
        assert store.query(vectors[1], 2, {"path": "b.md"})[0][0] == "extra"
        store.delete(["extra"])
        assert store.query(vectors[1], 2, {"path": "b.md"})[0][0] == only_b[0][0]
    finally:
        store.close()


def test_a_store_above_the_limit_is_searched_by_chroma(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(exact_module, "EXACT_LIMIT", 50)
    vectors = _unit(100, 6)
    store = VectorStore(collection="vaultd-big", vault_id="/v", model_id="m", path=tmp_path)
    try:
        store.upsert([str(i) for i in range(100)], vectors, [""] * 100, [{"path": "a.md"}] * 100)
        assert store.query(vectors[3], 1)[0][0] == "3"
        assert not store.exact
    finally:
        store.close()


def test_vectors_written_one_by_one_unlike_the_rest_are_found(tmp_path: Path) -> None:
    """Issue 35, finding 8: vectors written after the bulk, each unlike the vectors before it,
    or updated to such a vector, end with no link in Chroma's graph pointing to them (half of
    them here); a search must still find each as its own nearest."""
    rng = np.random.default_rng(35)
    width = 384
    common = rng.standard_normal(width)
    centres = rng.standard_normal((60, width)) + 2.0 * common
    bulk = centres[rng.integers(0, 60, 2000)] + 0.9 * rng.standard_normal((2000, width))
    bulk /= np.linalg.norm(bulk, axis=1, keepdims=True)

    def outlier() -> np.ndarray:
        vector = rng.standard_normal(width)
        vector = vector / np.linalg.norm(vector) + 0.6 * common / np.linalg.norm(common)
        return (vector / np.linalg.norm(vector)).astype(np.float32)

    store = VectorStore(collection="vaultd-outliers", vault_id="/v", model_id="m", path=tmp_path)
    try:
        ids = [f"b{i}" for i in range(len(bulk))]
        store.upsert(ids, bulk.astype(np.float32), [""] * len(ids), [{"path": "b.md"}] * len(ids))
        written: dict[str, np.ndarray] = {}
        for i in range(150):
            written[f"n{i}"] = outlier()
            store.upsert([f"n{i}"], written[f"n{i}"][None], [""], [{"path": "n.md"}])
        for i in range(150):  # a note first saved as a copy of another, then written
            store.upsert([f"u{i}"], bulk[i][None].astype(np.float32), [""], [{"path": "u.md"}])
        for i in range(150):
            written[f"u{i}"] = outlier()
            store.upsert([f"u{i}"], written[f"u{i}"][None], [""], [{"path": "u.md"}])
        lost = [i for i, vector in written.items() if store.query(vector, 10)[0][0] != i]
        assert not lost, f"{len(lost)} of {len(written)} written vectors not found by themselves"
    finally:
        store.close()
