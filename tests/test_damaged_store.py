"""Chroma is a cache of the manifest: a damaged, lost or disagreeing store is rebuilt from it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vaultd.app import CHROMA_DIR, open_index
from vaultd.config import Config, load_config
from vaultd.export import export_records
from vaultd.probe import DIRTY


def setup_index(root: Path) -> tuple[Config, list[dict[str, Any]]]:
    vault = root / "vault"
    vault.mkdir()
    for i in range(12):
        (vault / f"n{i}.md").write_text(f"# Note {i}\n\nAbout subject number {i} and more.\n")
    config_path = root / "c.toml"
    config_path.write_text(
        f'[vault]\npath = "{vault}"\n[store]\npath = "{root / "data"}"\n[log]\nlevel = "error"\n'
    )
    config = load_config(config_path, env={})
    with open_index(config, env={}) as index:
        index.indexer.reconcile()
        return config, list(export_records(index.store, with_vectors=True))


def reopened(config: Config) -> tuple[int, list[dict[str, Any]]]:
    with open_index(config, env={}) as index:
        summary = index.indexer.reconcile()
        assert summary.chunks_embedded == 0  # everything comes back from the manifest
        return summary.store_repaired, list(export_records(index.store, with_vectors=True))


def assert_same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert [r["id"] for r in a] == [r["id"] for r in b]
    for x, y in zip(a, b, strict=True):
        assert x["document"] == y["document"] and x["metadata"] == y["metadata"]
        assert np.allclose(x["vector"], y["vector"], atol=1e-5)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_store_is_moved_aside_and_rebuilt(tmp_path: Path, damage: str) -> None:
    config, before = setup_index(tmp_path)
    data = tmp_path / "data"
    database = data / CHROMA_DIR / "chroma.sqlite3"
    if damage == "garbage":
        with database.open("r+b") as handle:
            handle.seek(0)
            handle.write(os.urandom(4096))
    else:
        with database.open("r+b") as handle:
            handle.truncate(1024)
    (data / DIRTY).touch()  # as a crash leaves it
    repaired, after = reopened(config)
    assert repaired == len(before)
    assert_same(after, before)
    assert any(p.name.startswith("chroma.damaged-") for p in data.iterdir())
    assert not (data / DIRTY).exists()  # closed cleanly this time


def test_a_lost_store_is_rebuilt(tmp_path: Path) -> None:
    config, before = setup_index(tmp_path)
    shutil.rmtree(tmp_path / "data" / CHROMA_DIR)
    repaired, after = reopened(config)
    assert repaired == len(before)
    assert_same(after, before)


def test_a_store_that_disagrees_with_the_manifest_is_repaired(tmp_path: Path) -> None:
    config, before = setup_index(tmp_path)
    with open_index(config, env={}) as index:
        dropped = [r["id"] for r in before[:3]]
        index.store.delete(dropped)
        index.store.upsert(
            ["orphan-id"],
            np.ones((1, 384), dtype=np.float32) / np.sqrt(384),
            ["an orphan"],
            [{"path": "gone.md"}],
        )
    repaired, after = reopened(config)
    assert repaired == 4  # three restored, one orphan removed
    assert_same(after, before)
