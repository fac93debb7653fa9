"""Stores written by another chromadb, and a change of embedding model.

Chroma migrates a store forward when it opens it and cannot go back; chromadb 1.5.9 even opens
a store whose catalogue has migrations it does not know without a word. So vaultd records the
chromadb that last opened the store (manifest meta `chromadb_version`) and refuses a newer one
before anything opens it. A new model gets a new collection, filled by a full pass; the old
collection and the old model's vectors go only once that pass completes.

Each case copies one small index built with the default model, acts on it while no vaultd
runs, and ends by comparing the index with a fresh one of the same vault.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.convergence import Records, assert_same, export_of, fresh_export
from harness.daemon import short_socket_dir, write_config
from vaultd.config import EmbeddingSection, load_config
from vaultd.embedding.derive import model_id
from vaultd.embedding.spec import DEFAULT_MODEL_ID, MANIFEST_NAME, default_spec
from vaultd.errors import StoreMismatchError
from vaultd.index.open import CHROMADB_META, installed_chromadb, open_index
from vaultd.layout import CHROMA as CHROMA_DIR
from vaultd.layout import DIRTY
from vaultd.storage.chroma import collection_name
from vaultd.storage.manifest import Manifest
from vaultd.storage.probe import fingerprint

NOTES = {
    "volcano.md": "# Volcano\n\nLava flows down the slope after the eruption.\n",
    "violin.md": "# Violin\n\nThe concerto opens with the strings alone.\n",
    "glacier.md": "# Glacier\n\nThe ice retreats a little further every summer.\n",
    "bread.md": "---\ntags: [kitchen]\n---\n# Bread\n\nFeed the sourdough starter at night.\n",
    "notes/tides.md": (
        "# Tides\n\nCrabs hide in the pools at low tide.\n\n## Later\n\nThe sea comes back.\n"
    ),
}
OTHER_MODEL_ID = "minilm-cls"
#: The ids the two models' vectors get at the default precision (their collections' names).
GOLDEN_ID = model_id(DEFAULT_MODEL_ID, EmbeddingSection().precision)
OTHER_ID = model_id(OTHER_MODEL_ID, EmbeddingSection().precision)


@dataclass(frozen=True)
class Golden:
    vault: Path
    data: Path
    records: Records


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Golden:
    """A vault and its index with the default model, built once; cases work on copies."""
    root = tmp_path_factory.mktemp("versions")
    vault = root / "vault"
    for name, text in NOTES.items():
        (vault / name).parent.mkdir(parents=True, exist_ok=True)
        (vault / name).write_text(text, encoding="utf-8")
    config = write_config(root / "golden.toml", vault, root / "data", short_socket_dir() / "s")
    with open_index(load_config(config, env={}), env={}) as index:
        index.indexer.reconcile()
    return Golden(vault, root / "data", export_of(config))


@pytest.fixture(scope="module")
def other_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second model: the same network and tokenizer, CLS pooling, so its vectors differ."""
    spec = default_spec()
    directory = tmp_path_factory.mktemp("models") / "minilm-cls"
    directory.mkdir()
    (directory / "model.onnx").symlink_to(spec.onnx_path)
    (directory / "tokenizer.json").symlink_to(spec.tokenizer_path)
    (directory / MANIFEST_NAME).write_text(
        json.dumps({"id": OTHER_MODEL_ID, "dimensions": 384, "pooling": "cls", "window": 256})
    )
    return directory


@pytest.fixture(scope="module")
def other_reference(
    golden: Golden, other_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Records:
    """A fresh index of the vault with the second model."""
    return fresh_export(
        golden.vault, tmp_path_factory.mktemp("ref"), extra=model_section(other_model)
    )


def model_section(model: Path) -> str:
    return f'\n[embedding]\nmodel = "{model}"\n'


def copy_of(golden: Golden, tmp_path: Path, extra: str = "") -> Path:
    shutil.copytree(golden.data, tmp_path / "data")
    return write_config(
        tmp_path / "vaultd.toml",
        golden.vault,
        tmp_path / "data",
        short_socket_dir() / "s",
        extra=extra,
    )


def set_meta(data: Path, key: str, value: str | None) -> None:
    manifest = Manifest(data)
    try:
        if value is not None:
            manifest.set_meta(key, value)
    finally:
        manifest.close()
    if value is None:
        # What a manifest written before the record existed looks like.
        with closing(sqlite3.connect(data / "vaultd.db")) as db, db:
            db.execute("DELETE FROM meta WHERE key = ?", (key,))


def get_meta(data: Path, key: str) -> str | None:
    manifest = Manifest(data)
    try:
        return manifest.get_meta(key)
    finally:
        manifest.close()


def vaultd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vaultd", *args], capture_output=True, text=True, timeout=300
    )


def collections(data: Path) -> set[str]:
    with closing(
        sqlite3.connect(f"{(data / CHROMA_DIR / 'chroma.sqlite3').as_uri()}?mode=ro", uri=True)
    ) as db:
        return {r[0] for r in db.execute("SELECT name FROM collections")}


def segment_folders(data: Path) -> tuple[set[str], set[str]]:
    """(segment folders on disk, vector segments in Chroma's catalogue)."""
    store = data / CHROMA_DIR
    with closing(sqlite3.connect(f"{(store / 'chroma.sqlite3').as_uri()}?mode=ro", uri=True)) as db:
        vector = {r[0] for r in db.execute("SELECT id FROM segments WHERE scope = 'VECTOR'")}
    return {p.name for p in store.iterdir() if p.is_dir()}, vector


def vector_models(data: Path) -> dict[str, int]:
    with closing(sqlite3.connect(f"{(data / 'vaultd.db').as_uri()}?mode=ro", uri=True)) as db:
        return dict(db.execute("SELECT model, COUNT(*) FROM vectors GROUP BY model").fetchall())


def reconcile(config: Path) -> dict[str, Any]:
    with open_index(load_config(config, env={}), env={}) as index:
        return index.indexer.reconcile().as_dict()


# -- the chromadb that wrote the store ---------------------------------------------------------


def test_a_store_last_written_by_a_newer_chromadb_is_refused(
    golden: Golden, tmp_path: Path
) -> None:
    config = copy_of(golden, tmp_path)
    data = tmp_path / "data"
    assert get_meta(data, CHROMADB_META) == installed_chromadb()
    set_meta(data, CHROMADB_META, "99.0.0")
    before = fingerprint(data / CHROMA_DIR)

    result = vaultd("index", "--json", "-q", "--config", str(config))

    assert result.returncode == 78, result.stderr
    message = result.stderr
    assert "last written by chromadb 99.0.0" in message
    assert f"installed chromadb {installed_chromadb()}" in message
    assert "Upgrade vaultd" in message
    assert f"mv {data / CHROMA_DIR} {data / CHROMA_DIR}.newer" in message
    # Refused before anything opened the store: not probed, not marked, not migrated.
    assert fingerprint(data / CHROMA_DIR) == before
    assert not (data / DIRTY).exists()
    assert get_meta(data, CHROMADB_META) == "99.0.0"

    # The remedy given is true: with the store moved aside, it comes back from the manifest.
    (data / CHROMA_DIR).rename(data / f"{CHROMA_DIR}.newer")
    summary = reconcile(config)
    assert summary["chunks_embedded"] == 0
    assert summary["store_repaired"] == len(golden.records)
    assert get_meta(data, CHROMADB_META) == installed_chromadb()
    assert_same(export_of(config), golden.records)


@pytest.mark.parametrize("recorded", ["0.6.3", None], ids=["older", "unrecorded"])
def test_a_store_of_an_older_chromadb_opens_and_the_record_moves_forward(
    golden: Golden, tmp_path: Path, recorded: str | None
) -> None:
    config = copy_of(golden, tmp_path)
    data = tmp_path / "data"
    set_meta(data, CHROMADB_META, recorded)
    summary = reconcile(config)
    assert summary["chunks_embedded"] == 0 and summary["store_repaired"] == 0
    assert get_meta(data, CHROMADB_META) == installed_chromadb()
    assert_same(export_of(config), golden.records)


# -- a change of model -------------------------------------------------------------------------


def test_a_new_model_gets_a_new_collection_and_the_old_one_goes_when_it_is_complete(
    golden: Golden, tmp_path: Path, other_model: Path, other_reference: Records
) -> None:
    config = copy_of(golden, tmp_path, extra=model_section(other_model))
    data = tmp_path / "data"
    old = collection_name(golden.vault, GOLDEN_ID)
    new = collection_name(golden.vault, OTHER_ID)
    assert collections(data) == {old}

    result = vaultd("index", "--json", "-q", "--config", str(config))

    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    # Every chunk embedded again: no vector of the old model was reused for the new one.
    assert summary["chunks_embedded"] == len(golden.records) and summary["chunks_reused"] == 0
    assert collections(data) == {new}
    on_disk, in_catalogue = segment_folders(data)
    assert on_disk == in_catalogue and len(on_disk) == 1  # the old segment's folder is gone too
    assert vector_models(data) == {OTHER_ID: len(golden.records)}
    mine = export_of(config)
    assert {r["metadata"]["model"] for r in mine} == {OTHER_ID}
    # The two models' vectors differ (CLS pooling): the comparison below would catch a mix.
    assert not np.allclose(mine[0]["vector"], golden.records[0]["vector"], atol=1e-3)
    assert_same(mine, other_reference)


def test_an_interrupted_switch_keeps_the_old_collection_and_switching_back_is_free(
    golden: Golden, tmp_path: Path, other_model: Path
) -> None:
    config = copy_of(golden, tmp_path)
    data = tmp_path / "data"
    switched = write_config(
        tmp_path / "switched.toml",
        golden.vault,
        data,
        short_socket_dir() / "s",
        extra=model_section(other_model),
    )

    class Interrupted(Exception):
        pass

    def stop(in_flight: frozenset[str]) -> None:
        raise Interrupted

    # The first full pass with the new model is abandoned at its first safe point.
    with open_index(load_config(switched, env={}), env={}) as index, pytest.raises(Interrupted):
        index.indexer.reconcile(pause=stop)
    old = collection_name(golden.vault, GOLDEN_ID)
    assert old in collections(data)
    assert vector_models(data)[GOLDEN_ID] == len(golden.records)

    # Back to the old model: nothing to embed, the abandoned collection is dropped.
    summary = reconcile(config)
    assert summary["chunks_embedded"] == 0
    assert collections(data) == {old}
    assert set(vector_models(data)) == {GOLDEN_ID}
    assert_same(export_of(config), golden.records)


def test_a_dimension_changed_under_the_same_model_id_is_refused(
    golden: Golden, tmp_path: Path, other_model: Path
) -> None:
    model = tmp_path / "model"
    shutil.copytree(other_model, model, symlinks=True)
    config = copy_of(golden, tmp_path, extra=model_section(model))
    reconcile(config)
    reference = export_of(config)
    manifest = json.loads((model / MANIFEST_NAME).read_text())
    (model / MANIFEST_NAME).write_text(json.dumps({**manifest, "dimensions": 768}))

    with pytest.raises(StoreMismatchError, match="now has 768 dimensions") as raised:
        reconcile(config)
    assert raised.value.exit_code == 78
    assert "new id" in str(raised.value)

    # Nothing was touched: with the model as it was, the index is as it was.
    (model / MANIFEST_NAME).write_text(json.dumps(manifest))
    assert reconcile(config)["chunks_embedded"] == 0
    assert_same(export_of(config), reference)
