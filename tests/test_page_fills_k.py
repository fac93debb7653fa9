"""A page holds k hits whenever the index has them, in every mode, however hard the cap per
note bites (vaultd.index.search, docs/search.md "The path of a query"), and says why when it
cannot.

A vault of many short notes, each of near-duplicate passages, indexed for real (the model,
Chroma, the manifest): the best passages come in runs of one note, so a search that took its
candidates once and only then capped them per note left pages short.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from pydantic import TypeAdapter

from tests.small_vault import indexed
from vaultd.answers import SearchResult
from vaultd.index.open import Index
from vaultd.query import MAX_K, Filters, SearchQuery

NOTES_IN_LIGHTS = 120
PARTS = 5
COLOURS = ("red", "green", "white", "amber", "blue", "violet", "yellow", "orange")


def _note(n: int) -> str:
    # Each passage of note n repeats its note's words: its passages score alike (for BM25, by
    # how often "beacon" comes; for the model, by the same sentence), so they rank in a run.
    beacon = " ".join(["beacon"] * (n % 6 + 1))
    colour = COLOURS[n % len(COLOURS)]
    parts = [
        f"## Part {j}\n\nHarbour light {n}: the {colour} {beacon} flashes over the harbour at "
        f"night, {n} times a minute, seen from the pier.\n"
        for j in range(PARTS)
    ]
    return f"# Light {n}\n\n" + "\n".join(parts)


NOTES = {f"Lights/Light {n}.md": _note(n) for n in range(NOTES_IN_LIGHTS)}
NOTES.update({f"Few/Light {n}.md": _note(n) for n in range(5)})

QUERY = "harbour beacon flashes at night"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    with indexed(tmp_path_factory.mktemp("fills"), NOTES) as idx:
        yield idx


@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
@pytest.mark.parametrize("per_note", [1, 3])
@pytest.mark.parametrize("k", [10, 60, MAX_K])
def test_every_mode_fills_k_under_the_cap_per_note(
    index: Index, mode: str, per_note: int, k: int
) -> None:
    result = index.searcher.search(SearchQuery(QUERY, k=k, mode=mode, per_note=per_note))  # type: ignore[arg-type]
    notes = Counter(h.path for h in result.hits)
    assert len(result.hits) == k, (len(result.hits), len(notes))
    assert max(notes.values()) <= per_note
    if per_note == 1:
        assert len(notes) == k
    assert result.short is None


@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
def test_a_page_the_index_cannot_fill_says_so(index: Index, mode: str) -> None:
    result = index.searcher.search(
        SearchQuery(
            QUERY,
            k=MAX_K,
            mode=mode,  # type: ignore[arg-type]
            per_note=1,
            filters=Filters.of({"path_prefix": "Few/"}),
        )
    )
    assert sorted(h.path for h in result.hits) == sorted(p for p in NOTES if p.startswith("Few/"))
    assert result.short == "exhausted"
    assert TypeAdapter(SearchResult).dump_python(result, mode="json")["short"] == "exhausted"
