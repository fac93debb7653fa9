"""storage/upkeep: Chroma's log pruning turned on, retired collections dropped, orphan segment
folders removed, and a collection compacted without its dead elements."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from vaultd.storage import upkeep
from vaultd.storage.chroma import Chroma, collection_name
from vaultd.storage.upkeep import CHROMA_DATABASE, COMPACT_SUFFIX, Upkeep

VAULT = Path("/notes/vault")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Chroma]:
    opened = Chroma(
        collection=collection_name(VAULT, "m"), vault_id=str(VAULT), model_id="m", path=tmp_path
    )
    yield opened
    opened.close()


def test_log_pruning_is_turned_on_where_it_is_off(tmp_path: Path) -> None:
    assert upkeep.log_pruning(tmp_path) is None  # no store yet
    assert not upkeep.enable_log_pruning(tmp_path)
    Chroma(collection="notes", vault_id="v", model_id="m", path=tmp_path).close()
    assert upkeep.log_pruning(tmp_path) is True
    assert not upkeep.enable_log_pruning(tmp_path)  # nothing to do

    # As a store created before chromadb 0.5.6 is, once migrated.
    with sqlite3.connect(tmp_path / CHROMA_DATABASE) as db:
        [(raw,)] = db.execute("SELECT config_json_str FROM embeddings_queue_config")
        config = {**json.loads(raw), "automatically_purge": False}
        db.execute("UPDATE embeddings_queue_config SET config_json_str = ?", (json.dumps(config),))
    db.close()
    assert upkeep.log_pruning(tmp_path) is False
    assert upkeep.enable_log_pruning(tmp_path)
    assert upkeep.log_pruning(tmp_path) is True


def test_retired_collections_of_this_vault_are_dropped_and_others_kept(store: Chroma) -> None:
    def create(name: str, vault: Path, model: str) -> None:
        store.call(
            "create",
            lambda _: store.client.create_collection(
                name, metadata={"vaultd:vault": str(vault), "vaultd:model": model}
            ).add(ids=["x"], embeddings=[[1.0, 0.0]]),
        )

    create(collection_name(VAULT, "old"), VAULT, "old")  # the model switched from
    create(store.name + COMPACT_SUFFIX, VAULT, "m")  # an interrupted compaction's copy
    create("my-own-name", VAULT, "old")  # named by the user
    other = Path("/another/vault")
    # Named as this vault's would be, but another vault's by its metadata.
    create(collection_name(VAULT, "new"), other, "new")
    assert store.path is not None
    orphan = store.path / str(uuid.uuid4())
    orphan.mkdir()
    kept_folder = store.path / "not-a-segment"
    kept_folder.mkdir()

    dropped = Upkeep(store).drop_retired()
    assert sorted(dropped) == sorted([collection_name(VAULT, "old"), store.name + COMPACT_SUFFIX])
    left = store.call("list", lambda _: {c.name for c in store.client.list_collections()})
    assert left == {store.name, "my-own-name", collection_name(VAULT, "new")}
    assert not orphan.exists()
    assert kept_folder.exists()


def test_a_bloated_collection_is_compacted_keeping_its_records(store: Chroma) -> None:
    vectors = np.random.default_rng(0).random((2000, 4)).astype(np.float32)
    ids = [f"n{i}" for i in range(2000)]
    store.call(
        "add",
        lambda c: c.add(
            ids=ids,
            embeddings=vectors,
            documents=[f"text {i}" for i in range(2000)],
            metadatas=[{"i": i} for i in range(2000)],
        ),
    )
    tidy = Upkeep(store)
    assert tidy.segment_elements() == 2000
    assert not tidy.compact_if_bloated()  # no dead elements yet

    store.call("delete", lambda c: c.delete(ids=ids[:1900]))
    assert tidy.segment_elements() == 2000  # deleted elements stay in the segment
    assert tidy.compact_if_bloated()

    assert (tidy.segment_elements() or 0) < 2000
    got = store.call(
        "read", lambda c: c.get(ids=["n1950"], include=["embeddings", "documents", "metadatas"])
    )
    assert got["documents"] == ["text 1950"] and got["metadatas"] == [{"i": 1950}]
    np.testing.assert_allclose(got["embeddings"][0], vectors[1950])
    assert store.call("count", lambda c: c.count()) == 100
    names = store.call("list", lambda _: [c.name for c in store.client.list_collections()])
    assert names == [store.name]
    # The old segment's folder went with it: only live segments' folders remain.
    assert store.path is not None
    folders = [p for p in store.path.iterdir() if p.is_dir()]
    assert len(folders) <= 1
