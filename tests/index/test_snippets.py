"""index/snippets: the marks the words index put read back, and the passage with the most of
them cut to a snippet at word boundaries."""

from __future__ import annotations

from vaultd.index import snippets
from vaultd.index.snippets import merged, snippet, spans_of_marked, unspaced_spans


def test_marks_are_read_back_as_spans_of_the_clean_text() -> None:
    start, end = snippets.marks_asked()
    text, spans = spans_of_marked(f"the {start}keeper{end} climbs {start}stairs{end}")
    assert text == "the keeper climbs stairs"
    assert [text[s:e] for s, e in spans] == ["keeper", "stairs"]
    assert snippets.clean(f"a{start}b{end}c") == "abc"


def test_spans_are_merged_and_unspaced_runs_found_whole_or_by_pairs() -> None:
    assert merged([(5, 7), (0, 2), (2, 3), (6, 9)]) == [(0, 3), (5, 9)]
    assert unspaced_spans("東京タワーと東京", ["東京"]) == [(0, 2), (6, 8)]
    assert unspaced_spans("東京の大学", ["東京大学"]) == [(0, 2), (3, 5)]


def test_a_short_text_is_marked_whole() -> None:
    text = "The keeper climbs the stairs."
    assert snippet(text, [(4, 10)]) == "The **keeper** climbs the stairs."


def test_a_long_text_is_cut_around_the_marks_with_ellipses() -> None:
    lines = [f"line {i} says nothing of note at all here" for i in range(30)]
    lines[15] = "line 15 holds the lighthouse"
    text = "\n".join(lines)
    at = text.index("lighthouse")
    out = snippet(text, [(at, at + len("lighthouse"))], limit=80)
    assert "**lighthouse**" in out
    assert out.startswith(snippets.ELLIPSIS) and out.endswith(snippets.ELLIPSIS)
    assert len(out) <= 80 + 2 * len(snippets.ELLIPSIS) + 4
