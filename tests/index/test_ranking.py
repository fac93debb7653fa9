"""index/ranking: weighted reciprocal rank fusion, and a page of hits ordered by tier and
score, capped per note, from the real manifest."""

from __future__ import annotations

import pytest

from tests.storage.outcomes import written
from vaultd.config import SearchSection
from vaultd.index import known
from vaultd.index.known import Evidence
from vaultd.index.ranking import firsts, page, rrf
from vaultd.query import check_query
from vaultd.storage.manifest import Manifest


def test_rrf_adds_weighted_reciprocal_ranks_and_breaks_ties_by_id() -> None:
    fused = rrf(
        {"keyword": [("a", 9.0), ("b", 8.0)], "vector": [("b", 0.9), ("c", 0.8)]},
        k=1,
        weights={"keyword": 1.0, "vector": 2.0},
    )
    assert fused == [("b", pytest.approx(1 / 3 + 2 / 2)), ("c", 2 / 3), ("a", 1 / 2)]
    assert [i for i, _ in rrf({"x": [("z", 1.0)], "y": [("y", 1.0)]}, 1, {})] == ["y", "z"]


@pytest.fixture
def notes(manifest: Manifest) -> Manifest:
    manifest.apply(
        [
            written("a.md", ["first of a", "second of a", "third of a", "fourth of a"]),
            written("b.md", ["first of b", "second of b"]),
        ]
    )
    return manifest


def test_firsts_keeps_the_notes_first_passages_in_order(notes: Manifest) -> None:
    ranked = [("b.md#1", 3.0), ("a.md#0", 2.0), ("b.md#0", 1.0)]
    records = notes.notes.chunks_by_id([i for i, _ in ranked])
    assert firsts(ranked, records) == [("a.md#0", 2.0), ("b.md#0", 1.0)]


def test_a_page_is_capped_per_note_and_puts_known_items_first(notes: Manifest) -> None:
    ranked = {"keyword": [(f"a.md#{i}", 10.0 - i) for i in range(4)] + [("b.md#1", 1.0)]}
    query = check_query("second")
    settings = SearchSection()

    hits = page(notes, "m", query, "keyword", ranked, 10, 2, False, settings)
    assert [h.id for h in hits] == ["a.md#0", "a.md#1", "b.md#1"]
    assert hits[0].parts["keyword"]["rank"] == 1

    evidence = Evidence(chunks={known.RARE: frozenset({"b.md#1"})})
    hits = page(notes, "m", query, "keyword", ranked, 2, 0, False, settings, evidence)
    assert [h.id for h in hits] == ["b.md#1", "a.md#0"]
    assert hits[0].parts["known"]["tier"] == known.TIER_NAMES[known.RARE]
