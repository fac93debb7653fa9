"""index/writer: records upserted in slices, in order, on a thread of their own, into a real
Chroma collection; a write's error raised by `finish`; held records dropped by `discard`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from vaultd.errors import StoreError
from vaultd.index import writer as writer_module
from vaultd.index.writer import Writer
from vaultd.records import Record
from vaultd.storage.vectors import VectorStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[VectorStore]:
    opened = VectorStore(collection="vaultd-test", vault_id="/v", model_id="m", path=tmp_path)
    yield opened
    opened.close()


def record(i: int) -> Record:
    return Record(f"c{i}", "a.md", f"text {i}", {"path": "a.md", "index": i})


def vector(i: int) -> np.ndarray:
    out = np.zeros(4, np.float32)
    out[i % 4] = 1.0
    return out


def test_records_land_in_slices_with_what_their_vector_adds(
    store: VectorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "SLICE", 2)
    writer = Writer(store, lambda v: {"norm": float(np.linalg.norm(v))})
    try:
        for i in range(3):
            writer.add(record(i), vector(i))
        writer.finish()
        assert sorted(store.ids()) == ["c0", "c1", "c2"]
        got = store.get(["c2"])["c2"]
        assert got["document"] == "text 2"
        assert got["metadata"]["norm"] == 1.0 and got["metadata"]["index"] == 2

        writer.add(record(3), vector(3))
        mark = writer.sent()
        writer.finish()
        assert writer.landed(mark)
        assert "c3" in store.ids()
    finally:
        writer.close()


def test_discard_drops_what_is_held(store: VectorStore) -> None:
    writer = Writer(store)
    try:
        writer.add(record(0), vector(0))
        writer.discard()
        writer.finish()
        assert store.ids() == set()
    finally:
        writer.close()


def test_a_failed_write_is_raised_by_finish(store: VectorStore) -> None:
    writer = Writer(store)
    try:
        writer.add(record(0), vector(0))
        writer.finish()
        writer.add(record(1), np.ones(7, np.float32))  # not the collection's dimension
        with pytest.raises(StoreError):
            writer.finish()
    finally:
        writer.close()
