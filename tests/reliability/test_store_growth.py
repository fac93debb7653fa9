"""The embedded Chroma store stays bounded under a long stream of writes.

chromadb (since 0.5.6) prunes its write-ahead log, the `embeddings_queue` table, each time it
writes the HNSW segment (every `hnsw:sync_threshold`, 1000, records) in stores it created; a
store created earlier keeps pruning off, and vaultd turns it on with `chroma vacuum`. But
the segment never reuses the slot of a deleted record, so deleting and adding records (moves,
notes deleted and written again) grows `data_level0.bin` and `link_lists.bin` with the churn;
vaultd compacts the collection after a full pass once dead elements outnumber live ones.
`bench/memory/store_growth.py` runs the same at 100k upserts.

The vectors here are 32-dimensional: an HNSW update costs in proportion to the dimension, and
what grows (rows, elements, links) does not depend on it.
"""

from __future__ import annotations

import random
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.convergence import assert_same, export_of, fresh_export
from harness.daemon import short_socket_dir, write_config
from vaultd.config import load_config
from vaultd.index.open import open_index
from vaultd.layout import CHROMA as CHROMA_DIR
from vaultd.storage import upkeep
from vaultd.storage.metadata import chunk_metadata
from vaultd.storage.upkeep import COMPACT_MIN_DEAD, log_pruning
from vaultd.storage.vectors import Metadata, VectorStore

RECORDS = 500
DIM = 32
SYNC_THRESHOLD = 1000  # chromadb's default `hnsw:sync_threshold`
WORDS = ["garden", "river", "archive", "lantern", "copper", "meadow", "signal", "harbor"]


class Batch:
    """The same ids every round, with new vectors, text and metadata (notes edited)."""

    def __init__(self, seed: int = 3) -> None:
        self.rng = np.random.default_rng(seed)
        self.words = random.Random(seed)
        self.ids = [f"{i:032x}" for i in range(RECORDS)]
        self.round = 0
        self.vectors = np.zeros((RECORDS, DIM), dtype=np.float32)
        self.documents: list[str] = []
        self.metadatas: list[Metadata] = []
        self.next()

    def next(self) -> None:
        self.round += 1
        vectors = self.rng.standard_normal((RECORDS, DIM)).astype(np.float32)
        self.vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        self.documents = [" ".join(self.words.choices(WORDS, k=12)) for _ in self.ids]
        self.metadatas = [
            chunk_metadata(
                path=f"f{i % 5}/note {i // 2}.md",
                title=f"Note {i // 2}",
                tags=["project/alpha"] if i % 3 == 0 else [],
                aliases=[],
                link_targets=[f"note {i % 40}"],
                section="Part",
                headings=["Part"],
                index=i % 2,
                start_line=1,
                end_line=9,
                mtime_ns=self.round,
                sha256=f"{self.round:064x}",
                model_id="test-model",
            )
            for i in range(RECORDS)
        ]


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def chroma_rows(store_dir: Path, sql: str) -> list[Any]:
    database = store_dir / "chroma.sqlite3"
    with closing(sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)) as db:
        return db.execute(sql).fetchall()


def link_lists_bytes(store_dir: Path) -> int:
    return sum(p.stat().st_size for p in store_dir.glob("*/link_lists.bin"))


def assert_holds_exactly(store: VectorStore, batch: Batch) -> None:
    """Nothing lost, nothing extra: the store holds the records written last."""
    assert store.ids() == set(batch.ids)
    got = store.get(batch.ids, with_vectors=True)
    for i, chunk_id in enumerate(batch.ids):
        assert got[chunk_id]["document"] == batch.documents[i], chunk_id
        assert got[chunk_id]["metadata"] == dict(batch.metadatas[i]), chunk_id
        assert np.allclose(got[chunk_id]["vector"], batch.vectors[i], atol=1e-5), chunk_id


def assert_no_leftovers(store_dir: Path) -> None:
    """No segment folder without a segment, no array metadata without its record."""
    segments = {
        r[0] for r in chroma_rows(store_dir, "SELECT id FROM segments WHERE scope = 'VECTOR'")
    }
    assert {p.name for p in store_dir.iterdir() if p.is_dir()} <= segments
    orphans = chroma_rows(
        store_dir,
        "SELECT COUNT(*) FROM embedding_metadata_array WHERE id NOT IN (SELECT id FROM embeddings)",
    )
    assert orphans == [(0,)]


def test_upserting_the_same_records_keeps_the_store_bounded(tmp_path: Path) -> None:
    store_dir = tmp_path / "chroma"
    store = VectorStore(collection="vaultd-growth", vault_id="/v", model_id="m", path=store_dir)
    batch = Batch()
    rounds = 10
    sizes: list[int] = []
    links: list[int] = []
    try:
        for done in range(1, rounds + 1):
            store.upsert(batch.ids, batch.vectors, batch.documents, batch.metadatas)
            queued = chroma_rows(store_dir, "SELECT COUNT(*) FROM embeddings_queue")[0][0]
            # Pruned at every segment write: never more than one threshold's worth and a batch.
            assert queued <= SYNC_THRESHOLD + RECORDS, (done, queued)
            sizes.append(folder_bytes(store_dir))
            links.append(link_lists_bytes(store_dir))
            if done < rounds:
                batch.next()
        assert store.upkeep.segment_elements() == RECORDS  # updated in place, no dead elements
        # 2,500 upserts later the store is the size it was half-way: with pruning off, the log
        # grows by those 2,500 rows (about 1 MB, a third of the store).
        half = rounds // 2
        assert sizes[-1] <= sizes[half - 1] * 1.1, sizes
        assert links[-1] <= links[half - 1] * 1.1, links
        assert_holds_exactly(store, batch)
    finally:
        store.close()


def test_deleting_and_adding_again_is_compacted_and_stays_bounded(tmp_path: Path) -> None:
    store_dir = tmp_path / "chroma"
    store = VectorStore(collection="vaultd-growth", vault_id="/v", model_id="m", path=store_dir)
    batch = Batch()
    rounds = 6
    elements: list[int] = []
    sizes: list[int] = []
    compactions = 0
    try:
        store.upsert(batch.ids, batch.vectors, batch.documents, batch.metadatas)
        for _ in range(rounds):
            batch.next()
            store.delete(batch.ids)
            store.upsert(batch.ids, batch.vectors, batch.documents, batch.metadatas)
            # Chroma alone: every round leaves RECORDS dead elements behind.
            before = store.upkeep.segment_elements() or 0
            # What the daemon runs after each full pass.
            if store.upkeep.compact_if_bloated():
                compactions += 1
                assert before - RECORDS >= COMPACT_MIN_DEAD
            elements.append(store.upkeep.segment_elements() or 0)
            sizes.append(folder_bytes(store_dir))
        assert compactions >= 2
        # Dead elements stay under the threshold (after each check) instead of piling up.
        assert max(elements) < RECORDS + max(COMPACT_MIN_DEAD, RECORDS)
        assert sizes[-1] <= max(sizes[: rounds // 2]) * 1.25, sizes
        assert_no_leftovers(store_dir)
        assert_holds_exactly(store, batch)
    finally:
        store.close()


def test_a_full_pass_compacts_a_store_bloated_by_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the indexer: notes renamed back and forth, then the pass that compacts."""
    # A small vault: compact at a lower count of dead elements (the ratio rule still holds).
    monkeypatch.setattr(upkeep, "COMPACT_MIN_DEAD", 100)
    vault = tmp_path / "vault"
    vault.mkdir()
    for i in range(120):
        (vault / f"n{i}-0.md").write_text(f"# Note {i}\n\nAbout {WORDS[i % len(WORDS)]} {i}.\n")
    config = write_config(
        tmp_path / "vaultd.toml", vault, tmp_path / "data", short_socket_dir() / "s"
    )
    store_dir = tmp_path / "data" / CHROMA_DIR

    def collection_ids() -> set[str]:
        return {r[0] for r in chroma_rows(store_dir, "SELECT id FROM collections")}

    with open_index(load_config(config, env={}), env={}) as index:
        index.indexer.reconcile()
        first = collection_ids()
        for round_ in range(1, 6):
            for i in range(120):
                (vault / f"n{i}-{round_ - 1}.md").rename(vault / f"n{i}-{round_}.md")
            summary = index.indexer.reconcile()
            assert summary.notes_moved == 120 and summary.chunks_embedded == 0
        # Compacted: the records live in a new collection under the same name.
        assert collection_ids() != first and len(collection_ids()) == 1
        # The index goes on working after the swap.
        (vault / "n0-5.md").write_text("# Note 0\n\nRewritten after the compaction.\n")
        (vault / "n1-5.md").unlink()
        index.indexer.reconcile()
    assert_no_leftovers(store_dir)
    assert_same(export_of(config), fresh_export(vault, tmp_path / "reference"))


def test_a_store_that_does_not_prune_its_log_is_vacuumed_at_open(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    for i, word in enumerate(WORDS[:5]):
        (vault / f"{word}.md").write_text(f"# {word.title()}\n\nA note about the {word} {i}.\n")
    config = write_config(
        tmp_path / "vaultd.toml", vault, tmp_path / "data", short_socket_dir() / "s"
    )
    store_dir = tmp_path / "data" / CHROMA_DIR
    with open_index(load_config(config, env={}), env={}) as index:
        index.indexer.reconcile()
    assert log_pruning(store_dir) is True
    # What a store created before chromadb 0.5.6 looks like once migrated (an old chromadb
    # cannot be installed here): the setting is off, and the log then grows without bound.
    with closing(sqlite3.connect(store_dir / "chroma.sqlite3")) as db, db:
        db.execute(
            "UPDATE embeddings_queue_config SET config_json_str = "
            "json_set(config_json_str, '$.automatically_purge', json('false'))"
        )
    assert log_pruning(store_dir) is False

    with open_index(load_config(config, env={}), env={}) as index:
        assert index.indexer.reconcile().chunks_embedded == 0

    assert log_pruning(store_dir) is True
    assert [r[0] for r in chroma_rows(store_dir, "SELECT operation FROM maintenance_log")] == [
        "vacuum"
    ]
    assert_same(export_of(config), fresh_export(vault, tmp_path / "reference"))
