"""storage/keyword: BM25 over the words and pairs indexes, the substring scan, highlights,
stems, the words that tell a text from the rest, and the chunks holding a match."""

from __future__ import annotations

from tests.storage.outcomes import written
from vaultd.storage import keyword
from vaultd.storage.manifest import Manifest


def _write(manifest: Manifest, *made: tuple[str, list[str]]) -> None:
    for path, texts in made:
        manifest.notes.write(written(path, texts), now=1.0)


def test_bm25_finds_stemmed_words_best_first(manifest: Manifest) -> None:
    _write(
        manifest,
        ("many.md", ["running runs and a runner ran running"]),
        ("once.md", ["she went running once, among many other words said here"]),
        ("none.md", ["nothing of the sort"]),
    )

    hits = manifest.keyword.bm25("run", 10)
    assert [h[0] for h in hits] == ["many.md#0", "once.md#0"]
    assert hits[0][1] > hits[1][1] > 0
    assert manifest.keyword.bm25("run", 1) == hits[:1]


def test_bm25_weighs_the_title_above_the_text(manifest: Manifest) -> None:
    manifest.notes.write(written("a.md", ["about gardens"], title="Otters"), now=1.0)
    manifest.notes.write(written("b.md", ["otters swim in the river"], title="Rivers"), now=1.0)

    assert [h[0] for h in manifest.keyword.bm25("otters", 10)] == ["a.md#0", "b.md#0"]
    text_only = (0.0, 0.0, 0.0, 1.0)
    assert [h[0] for h in manifest.keyword.bm25("otters", 10, weights=text_only)] == [
        "b.md#0",
        "a.md#0",
    ]


def test_bm25_keeps_to_the_paths_given_and_the_required_match(manifest: Manifest) -> None:
    _write(manifest, ("a.md", ["apple pie"]), ("b.md", ["apple tart"]), ("c.md", ["apple"]))

    assert [h[0] for h in manifest.keyword.bm25("apple", 10, ["b.md", "c.md"])] == [
        "c.md#0",
        "b.md#0",
    ]
    assert manifest.keyword.bm25("apple", 10, []) == []
    assert [h[0] for h in manifest.keyword.bm25("apple", 10, require="tart")] == ["b.md#0"]


def test_the_pairs_index_holds_unspaced_scripts(manifest: Manifest) -> None:
    _write(manifest, ("zh.md", ["我们学习中文"]), ("en.md", ["we learn chinese"]))

    assert [h[0] for h in manifest.keyword.bm25('"中文"', 10, index="pairs")] == ["zh.md#0"]
    assert manifest.keyword.bm25('"中文"', 10) == []


def test_substring_ranks_by_terms_matched_then_occurrences(manifest: Manifest) -> None:
    _write(
        manifest,
        ("one.md", ["猫"]),
        ("two.md", ["猫 猫 猫"]),
        ("both.md", ["猫 and 犬"]),
        ("none.md", ["鳥"]),
    )

    ranked = [h[0] for h in manifest.keyword.substring(["猫", "犬"], 10)]
    assert ranked == ["both.md#0", "two.md#0", "one.md#0"]
    assert [h[0] for h in manifest.keyword.substring(["猫"], 10, ["one.md"])] == ["one.md#0"]
    assert manifest.keyword.substring([""], 10) == []


def test_marked_highlights_matched_tokens_of_matching_chunks_only(manifest: Manifest) -> None:
    _write(manifest, ("a.md", ["Dogs were running"]), ("b.md", ["cats sleep"]))

    assert manifest.keyword.marked("run", ["a.md#0", "b.md#0"], "[", "]") == {
        "a.md#0": "Dogs were [running]"
    }
    assert manifest.keyword.marked("", ["a.md#0"], "[", "]") == {}


def test_stems_agree_with_the_words_index() -> None:
    assert keyword.stems(["Running", "café", "e-mail", "..."]) == {
        "Running": "run",
        "café": "cafe",
        "e-mail": "e",
    }
    assert keyword.stems([]) == {}


def test_term_chunks_counts_the_chunks_holding_each_term(manifest: Manifest) -> None:
    _write(manifest, ("a.md", ["fox", "fox dog"]), ("b.md", ["dog"]))

    assert manifest.keyword.term_chunks(["fox", "dog", "cat"]) == {"fox": 2, "dog": 2}


def test_distinctive_words_leave_out_own_and_common_terms(manifest: Manifest) -> None:
    _write(manifest, *((f"n{i}.md", ["common"]) for i in range(8)))
    _write(manifest, ("x.md", ["rare"]), ("y.md", ["rare mine"]))
    passage = [["common", "rare", "mine", "rare"]]
    words = manifest.keyword.distinctive_words

    # "mine" only in the note's own chunk; "common" in 8 of 10 chunks, over a share of 0.5.
    assert words(passage, [["rare", "mine"]], 5, 0.5, floor=1) == ["rare"]
    # Without the cap, the common word counts, below the rare one.
    assert words(passage, [["rare", "mine"]], 5, 1.0, floor=1) == ["rare", "common"]


def test_chunks_holding_keeps_to_paths_and_limit(manifest: Manifest) -> None:
    manifest.notes.write(written("a.md", ["river", "rivers"]), now=1.0)
    manifest.notes.write(written("b.md", ["river"]), now=1.0)

    assert sorted(manifest.keyword.chunks_holding("river", 10)) == [
        ("a.md#0", "a.md"),
        ("a.md#1", "a.md"),
        ("b.md#0", "b.md"),
    ]
    assert manifest.keyword.chunks_holding("river", 10, ["b.md"]) == [("b.md#0", "b.md")]
    assert len(manifest.keyword.chunks_holding("river", 2)) == 2
