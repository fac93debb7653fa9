"""index/snippets: the marks the words index put read back, and the passage with the most of
them cut to a snippet at word boundaries."""

from __future__ import annotations

from pathlib import Path

from tests.storage.outcomes import written
from vaultd.answers import Hit
from vaultd.index import snippets
from vaultd.index.snippets import merged, snippet, spans_of_marked, unspaced_spans
from vaultd.query import check_query
from vaultd.storage.manifest import Manifest


def test_marks_are_read_back_as_spans_of_the_clean_text() -> None:
    start, end = snippets.marks_asked()
    text, spans = spans_of_marked(f"the {start}keeper{end} climbs {start}stairs{end}")
    assert text == "the keeper climbs stairs"
    assert [text[s:e] for s, e in spans] == ["keeper", "stairs"]


def test_spans_are_merged_and_unspaced_runs_found_whole_or_by_pairs() -> None:
    assert merged([(5, 7), (0, 2), (2, 3), (6, 9)]) == [(0, 3), (5, 9)]
    assert unspaced_spans("東京タワーと東京", ["東京"]) == [(0, 2), (6, 8)]
    assert unspaced_spans("東京の大学", ["東京大学"]) == [(0, 2), (3, 5)]


def test_a_short_text_is_the_snippet_whole_with_its_ranges() -> None:
    text = "  The **keeper** climbs the stairs.\n"
    at = text.index("keeper")
    shown, ranges = snippet(text, [(at, at + 6)])
    # The text as it is, its own markup kept; the range moved with the blank space taken off.
    assert shown == "The **keeper** climbs the stairs."
    assert [shown[s:e] for s, e in ranges] == ["keeper"]


def test_a_long_text_is_cut_around_the_marks_with_ellipses() -> None:
    lines = [f"line {i} says nothing of note at all here" for i in range(30)]
    lines[15] = "line 15 holds the lighthouse"
    text = "\n".join(lines)
    at = text.index("lighthouse")
    holds = text.index("holds")
    spans = [(at, at + len("lighthouse")), (holds, holds + 5), (0, 4)]
    out, ranges = snippet(text, spans, limit=80)
    # Counted from the snippet's start, its ellipsis included; a range outside it left out.
    assert [out[s:e] for s, e in ranges] == ["holds", "lighthouse"]
    assert out.startswith(snippets.ELLIPSIS) and out.endswith(snippets.ELLIPSIS)
    assert out.strip(snippets.ELLIPSIS) in text
    assert len(out) <= 80 + 2 * len(snippets.ELLIPSIS)


def test_a_range_across_the_cut_is_cut_with_it() -> None:
    text = "word " * 200
    shown, ranges = snippet(text, [(0, 900)], limit=50)
    assert ranges == [(0, len(shown) - len(snippets.ELLIPSIS))]


def test_hits_get_the_ranges_the_words_index_matched_in_their_text(tmp_path: Path) -> None:
    manifest = Manifest(tmp_path / "data")
    try:
        manifest.apply([written("k.md", ["The keeper climbs the stairs."])])
        hit = Hit(
            id="k.md#0",
            path="k.md",
            title="k",
            section="",
            start_line=1,
            end_line=1,
            score=1.0,
            text="The keeper climbs the stairs.",
            tags=(),
            indexed=True,
            kind="note",
        )
        (found,) = snippets.highlighted(manifest, [hit], check_query("keepers"), (), cut=False)
        assert [found.text[s:e] for s, e in found.highlights] == ["keeper"]
        # A correction's term is highlighted where it matched too.
        (found,) = snippets.highlighted(manifest, [hit], check_query("x"), ("stair",), cut=True)
        assert found.snippet == "The keeper climbs the stairs."
        assert [found.snippet[s:e] for s, e in found.highlights] == ["stairs"]
    finally:
        manifest.close()
