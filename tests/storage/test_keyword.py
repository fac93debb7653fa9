"""storage/keyword: BM25 over the words and pairs indexes, the substring scan, highlights,
stems and the words that tell a text from the rest."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from tests.storage.outcomes import written
from vaultd.storage import keyword, notes
from vaultd.storage.schema import Query


def _write(db: sqlite3.Connection, *made: tuple[str, list[str]]) -> None:
    for path, texts in made:
        notes.write(db, written(path, texts), now=1.0)


def test_bm25_finds_stemmed_words_best_first(db: sqlite3.Connection, query: Query) -> None:
    _write(
        db,
        ("many.md", ["running runs and a runner ran running"]),
        ("once.md", ["she went running once, among many other words said here"]),
        ("none.md", ["nothing of the sort"]),
    )

    hits = keyword.bm25(query, "run", 10)
    assert [h[0] for h in hits] == ["many.md#0", "once.md#0"]
    assert hits[0][1] > hits[1][1] > 0
    assert keyword.bm25(query, "run", 1) == hits[:1]


def test_bm25_weighs_the_title_above_the_text(db: sqlite3.Connection, query: Query) -> None:
    notes.write(db, written("a.md", ["about gardens"], title="Otters"), now=1.0)
    notes.write(db, written("b.md", ["otters swim in the river"], title="Rivers"), now=1.0)

    assert [h[0] for h in keyword.bm25(query, "otters", 10)] == ["a.md#0", "b.md#0"]
    text_only = (0.0, 0.0, 0.0, 1.0)
    assert [h[0] for h in keyword.bm25(query, "otters", 10, weights=text_only)] == [
        "b.md#0",
        "a.md#0",
    ]


def test_bm25_keeps_to_the_paths_given_and_the_required_match(
    db: sqlite3.Connection, query: Query
) -> None:
    _write(db, ("a.md", ["apple pie"]), ("b.md", ["apple tart"]), ("c.md", ["apple"]))

    assert [h[0] for h in keyword.bm25(query, "apple", 10, ["b.md", "c.md"])] == [
        "c.md#0",
        "b.md#0",
    ]
    assert keyword.bm25(query, "apple", 10, []) == []
    assert [h[0] for h in keyword.bm25(query, "apple", 10, require="tart")] == ["b.md#0"]


def test_the_pairs_index_holds_unspaced_scripts(db: sqlite3.Connection, query: Query) -> None:
    _write(db, ("zh.md", ["我们学习中文"]), ("en.md", ["we learn chinese"]))

    assert [h[0] for h in keyword.bm25(query, '"中文"', 10, index="pairs")] == ["zh.md#0"]
    assert keyword.bm25(query, '"中文"', 10) == []


def test_substring_ranks_by_terms_matched_then_occurrences(
    db: sqlite3.Connection, query: Query
) -> None:
    _write(
        db,
        ("one.md", ["猫"]),
        ("two.md", ["猫 猫 猫"]),
        ("both.md", ["猫 and 犬"]),
        ("none.md", ["鳥"]),
    )

    ranked = [h[0] for h in keyword.substring(query, ["猫", "犬"], 10)]
    assert ranked == ["both.md#0", "two.md#0", "one.md#0"]
    assert [h[0] for h in keyword.substring(query, ["猫"], 10, ["one.md"])] == ["one.md#0"]
    assert keyword.substring(query, [""], 10) == []


def test_marked_highlights_matched_tokens_of_matching_chunks_only(
    db: sqlite3.Connection, query: Query
) -> None:
    _write(db, ("a.md", ["Dogs were running"]), ("b.md", ["cats sleep"]))

    assert keyword.marked(query, "run", ["a.md#0", "b.md#0"], "[", "]") == {
        "a.md#0": "Dogs were [running]"
    }
    assert keyword.marked(query, "", ["a.md#0"], "[", "]") == {}


def test_stems_agree_with_the_words_index() -> None:
    assert keyword.stems(["Running", "café", "e-mail", "..."]) == {
        "Running": "run",
        "café": "cafe",
        "e-mail": "e",
    }
    assert keyword.stems([]) == {}


def test_term_chunks_counts_the_chunks_holding_each_term(
    db: sqlite3.Connection, query: Query
) -> None:
    _write(db, ("a.md", ["fox", "fox dog"]), ("b.md", ["dog"]))

    assert keyword.term_chunks(query, ["fox", "dog", "cat"]) == {"fox": 2, "dog": 2}


def test_distinctive_words_leave_out_own_and_common_terms(
    db: sqlite3.Connection, query: Query
) -> None:
    def chunks_with(terms: Sequence[str]) -> tuple[dict[str, int], int]:
        return keyword.term_chunks(query, terms), 10

    _write(db, *((f"n{i}.md", ["common"]) for i in range(8)))
    _write(db, ("x.md", ["rare"]), ("y.md", ["rare mine"]))
    passage = [["common", "rare", "mine", "rare"]]

    # "mine" only in the note's own chunk; "common" in 8 of 10 chunks, over a share of 0.5.
    words = keyword.distinctive_words(passage, [["rare", "mine"]], chunks_with, 5, 0.5, floor=1)
    assert words == ["rare"]
    # Without the cap, the common word counts, below the rare one.
    words = keyword.distinctive_words(passage, [["rare", "mine"]], chunks_with, 5, 1.0, floor=1)
    assert words == ["rare", "common"]
