"""storage/vocabulary: the words index's terms for typo candidates, and the notes' names."""

from __future__ import annotations

import sqlite3

from tests.storage.outcomes import left_out, written
from vaultd.storage import notes, quarantine, vocabulary
from vaultd.storage.schema import Query
from vaultd.storage.vocabulary import Names, Vocabulary


def test_fold_drops_case_accents_and_punctuation() -> None:
    assert vocabulary.fold("Canvas - Send to back.md") == "canvas send to back md"
    assert vocabulary.fold("  Café  Crème! ") == "cafe creme"
    assert vocabulary.fold("Straße") == "strasse"


def test_the_vocabulary_reads_the_words_index(db: sqlite3.Connection, query: Query) -> None:
    notes.write(db, written("a.md", ["graphs and charts", "graphs"], title="A"), now=1.0)

    read = Vocabulary.read(query)
    assert read.rows == 2
    assert read.chunks["graph"] == 2
    assert read.chunks["chart"] == 1


def test_neighbours_are_near_terms_fewest_edits_then_most_chunks() -> None:
    terms = Vocabulary.of(
        {"graph": 5, "grape": 9, "graphs": 12, "graze": 20, "giraffe": 3, "x2023": 1}
    )

    assert terms.neighbours("grahp", 1) == [("graph", 1)]
    assert terms.neighbours("graph", 2) == [("graphs", 1), ("grape", 1), ("graze", 2)]
    assert terms.neighbours("graph", 1) == [("graphs", 1), ("grape", 1)]
    assert terms.neighbours("graph", 2, limit=1) == [("graphs", 1)]
    # Numbers and ids are never corrected to, and a word is never its own neighbour.
    assert terms.neighbours("x2024", 1) == []
    assert terms.neighbours("", 1) == []
    assert len(terms) == 6


def test_names_find_notes_by_title_alias_file_name_and_path(
    db: sqlite3.Connection, query: Query
) -> None:
    notes.write(db, written("dir/Sub Note.md", title="Grand Title", aliases=["Nick"]), now=1.0)
    notes.write(db, written("other/sub note.md", title="Other"), now=1.0)
    notes.write(db, written("gone.md", title="Gone"), now=1.0)
    quarantine.record_left_out(db, left_out("gone.md"), when=2.0)

    names = Names.read(query)
    assert names.notes_named("grand title") == ("dir/Sub Note.md",)
    assert names.notes_named("NICK") == ("dir/Sub Note.md",)
    assert names.notes_named("sub-note") == ("dir/Sub Note.md", "other/sub note.md")
    assert names.notes_named("dir/sub note") == ("dir/Sub Note.md",)
    assert names.notes_named("gone") == ()


def test_chunks_holding_keeps_to_paths_and_limit(db: sqlite3.Connection, query: Query) -> None:
    notes.write(db, written("a.md", ["river", "rivers"]), now=1.0)
    notes.write(db, written("b.md", ["river"]), now=1.0)

    assert sorted(vocabulary.chunks_holding(query, "river", 10)) == [
        ("a.md#0", "a.md"),
        ("a.md#1", "a.md"),
        ("b.md#0", "b.md"),
    ]
    assert vocabulary.chunks_holding(query, "river", 10, ["b.md"]) == [("b.md#0", "b.md")]
    assert len(vocabulary.chunks_holding(query, "river", 2)) == 2
