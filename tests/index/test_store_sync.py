"""index/store_sync: Chroma repaired from the manifest, holding exactly the chunks with a
stored vector."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.small_vault import indexed

NOTES = {"a.md": "# A\n\nThe keeper climbs the stairs.\n", "b.md": "# B\n\nGulls at low tide.\n"}


def test_a_store_in_step_needs_no_repair(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        assert index.indexer.sync.sync() == 0


def test_lost_records_are_put_back_and_strays_dropped(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        store, sync = index.store, index.indexer.sync
        ids = sorted(store.ids())
        before = store.get(ids)
        store.delete([ids[0]])
        assert sync.sync() == 1
        assert store.get(ids) == before

        record = store.get([ids[1]], with_vectors=True)[ids[1]]
        vector = np.asarray(record["vector"], np.float32)[None, :]
        store.upsert(["stray"], vector, ["text"], [record["metadata"]])
        assert sync.sync() == 1
        assert sorted(store.ids()) == ids


def test_put_back_restores_a_note_whose_records_were_overwritten(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        store = index.store
        ids = sorted(store.ids())
        before = store.get(ids)
        a_ids = [i for i in ids if before[i]["metadata"]["path"] == "a.md"]
        store.delete(a_ids)
        index.indexer.sync.put_back(a_ids, ["a.md"])
        assert store.get(ids) == before
