"""Chroma is a cache of the manifest: a damaged or lost store is rebuilt from it (in process).

The same faults met by the real daemon, and a store that disagrees with the manifest, are in
tests/reliability/test_damaged_store.py.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vaultd.config import Config, load_config
from vaultd.index.export import export_records
from vaultd.index.open import open_index
from vaultd.layout import CHROMA as CHROMA_DIR
from vaultd.layout import CLEAN, DIRTY
from vaultd.storage.probe import last_moved_aside, why_probe


def setup_index(root: Path) -> tuple[Config, list[dict[str, Any]]]:
    vault = root / "vault"
    vault.mkdir()
    for i in range(12):
        (vault / f"n{i}.md").write_text(
            f'---\nup: "[[Index]]"\n---\n# Note {i}\n\nAbout subject number {i}, see [[n{i + 1}]].'
            "\n\n## Later\n\nThen [[Elsewhere]] and more.\n"
        )
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


def test_each_chunk_carries_its_own_links_and_the_front_matters(tmp_path: Path) -> None:
    _, records = setup_index(tmp_path)
    links = {
        r["metadata"]["section"]: r["metadata"]["links"]
        for r in records
        if r["metadata"]["path"] == "n0.md"
    }
    assert links == {"Note 0": ["Index", "n1"], "Note 0 > Later": ["Elsewhere", "Index"]}


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


def test_an_untouched_store_is_not_probed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe costs a child process: a store closed cleanly and unchanged skips it."""
    config, before = setup_index(tmp_path)
    assert (tmp_path / "data" / CLEAN).exists() and not (tmp_path / "data" / DIRTY).exists()

    def unexpected(chroma_dir: Path) -> str | None:
        raise AssertionError(f"{chroma_dir} was probed")

    monkeypatch.setattr("vaultd.storage.probe.probe", unexpected)
    repaired, after = reopened(config)
    assert repaired == 0
    assert_same(after, before)


def test_a_store_changed_while_stopped_is_probed(tmp_path: Path) -> None:
    """No crash, but the files differ from the clean close's record: probe, then move aside."""
    config, before = setup_index(tmp_path)
    data = tmp_path / "data"
    os.truncate(data / CHROMA_DIR / "chroma.sqlite3", 1024)
    repaired, after = reopened(config)
    assert repaired == len(before)
    assert_same(after, before)
    record = last_moved_aside(data)
    assert record is not None and "malformed" in record["problem"]
    assert Path(record["moved_to"]).is_dir()


def test_a_failed_clean_close_record_keeps_the_dirty_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk at shutdown: without the record of a clean close, the next start probes."""
    config, _ = setup_index(tmp_path)
    data = tmp_path / "data"

    def full(path: Path, text: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("vaultd.storage.probe._write_atomically", full)
    with open_index(config, env={}):
        pass
    assert (data / DIRTY).exists() and not (data / CLEAN).exists()
    assert why_probe(data, data / CHROMA_DIR) == "the last process did not close the store"
