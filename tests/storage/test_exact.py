"""storage/exact: exact nearest-neighbour search over a copy of a collection's vectors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vaultd.errors import StoreError
from vaultd.storage import exact
from vaultd.storage.chroma import Chroma
from vaultd.storage.exact import ExactCopy, ExactIndex

VECTORS = {
    "east": [1.0, 0.0, 0.0],
    "north": [0.0, 1.0, 0.0],
    "north-east": [1.0, 1.0, 0.0],
    "up": [0.0, 0.0, 5.0],
}


def _index(unit: bool = True) -> ExactIndex:
    index = ExactIndex(unit=unit)
    index.put(list(VECTORS), np.array(list(VECTORS.values()), dtype=np.float32))
    return index


def test_cosine_finds_directions_best_first() -> None:
    found = _index().nearest(np.array([2.0, 0.1, 0.0]), 2)
    assert [i for i, _ in found] == ["east", "north-east"]
    assert found[0][1] == pytest.approx(0.99875, abs=1e-4)
    assert [i for i, _ in _index().nearest(np.array([0.0, 0.0, 1.0]), 1)] == ["up"]


def test_a_dot_product_takes_lengths_as_they_are() -> None:
    found = _index(unit=False).nearest(np.array([1.0, 1.0, 1.0]), 4)
    assert found == [("up", 5.0), ("north-east", 2.0), ("east", 1.0), ("north", 1.0)]


def test_put_replaces_and_drop_forgets() -> None:
    index = _index()
    index.put(["east"], np.array([[0.0, -1.0, 0.0]]))
    assert [i for i, _ in index.nearest(np.array([0.0, -1.0, 0.0]), 1)] == ["east"]
    version = index.version
    index.drop(["north", "absent"])
    assert index.version == version + 1
    assert len(index) == 3
    assert "north" not in [i for i, _ in index.nearest(np.array([0.0, 1.0, 0.0]), 4)]
    index.put(["west"], np.array([[-1.0, 0.0, 0.0]]))
    assert len(index) == 4
    assert index.nearest(np.array([-1.0, 0.0, 0.0]), 1)[0][0] == "west"


def test_vectors_of_another_dimension_are_refused_and_never_match() -> None:
    index = _index()
    with pytest.raises(StoreError, match="2 dimensions among 3"):
        index.put(["flat"], np.array([[1.0, 0.0]]))
    assert index.nearest(np.array([1.0, 0.0]), 1) == []
    assert ExactIndex(unit=True).nearest(np.array([1.0]), 1) == []


def test_allowed_rows_keep_to_the_mask_and_not_to_rows_added_after_it() -> None:
    index = _index()
    allowed = index.rows_of(["north", "up", "absent"])
    index.put(["north-by-east"], np.array([[0.1, 1.0, 0.0]]))
    found = index.nearest(np.array([1.0, 0.0, 0.0]), 5, allowed)
    assert sorted(i for i, _ in found) == ["north", "up"]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Chroma]:
    opened = Chroma(collection="notes", vault_id="v", model_id="m", path=tmp_path)
    opened.call(
        "add",
        lambda c: c.add(
            ids=list(VECTORS),
            embeddings=list(VECTORS.values()),
            metadatas=[{"side": "up" if i == "up" else "flat"} for i in VECTORS],
        ),
    )
    yield opened
    opened.close()


def _search(copy: ExactCopy, store: Chroma, row: list[float], k: int, **where: Any) -> Any:
    return store.call(
        "search", lambda c: copy.search(c, np.array([row], dtype=np.float32), k, where or None)
    )


def test_the_copy_is_made_on_the_first_search_and_kept_in_step(store: Chroma) -> None:
    copy = ExactCopy("cosine")
    assert not copy.ready
    [found] = _search(copy, store, [1.0, 0.1, 0.0], 2)
    assert [i for i, _ in found] == ["east", "north-east"]
    assert copy.ready

    copy.written(["south"], np.array([[0.0, -1.0, 0.0]], dtype=np.float32))
    copy.written(["east"], None)
    [found] = _search(copy, store, [0.0, -1.0, 0.0], 1)
    assert found[0][0] == "south"
    [found] = _search(copy, store, [1.0, 0.0, 0.0], 4)
    assert "east" not in [i for i, _ in found]

    copy.reset()
    assert not copy.ready
    [found] = _search(copy, store, [1.0, 0.0, 0.0], 1)
    assert found[0][0] == "east"  # read afresh from the collection


def test_a_filter_is_chromas_own(store: Chroma) -> None:
    copy = ExactCopy("cosine")
    [found] = _search(copy, store, [0.0, 0.0, 1.0], 4, side="flat")
    assert sorted(i for i, _ in found) == ["east", "north", "north-east"]


def test_a_collection_over_the_limit_is_left_to_chroma(
    store: Chroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(exact, "EXACT_LIMIT", 3)
    copy = ExactCopy("cosine")
    assert _search(copy, store, [1.0, 0.0, 0.0], 1) is None
    assert not copy.ready
