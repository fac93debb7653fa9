"""storage/vocabulary: the words index's terms for typo candidates, and the notes' names, as
the manifest reads them."""

from __future__ import annotations

from tests.storage.outcomes import left_out, written
from vaultd.storage import vocabulary
from vaultd.storage.manifest import Manifest
from vaultd.storage.vocabulary import Vocabulary


def test_fold_drops_case_accents_and_punctuation() -> None:
    assert vocabulary.fold("Canvas - Send to back.md") == "canvas send to back md"
    assert vocabulary.fold("  Café  Crème! ") == "cafe creme"
    assert vocabulary.fold("Straße") == "strasse"


def test_the_vocabulary_reads_the_words_index(manifest: Manifest) -> None:
    manifest.notes.write(written("a.md", ["graphs and charts", "graphs"], title="A"), now=1.0)

    read = manifest.keyword.vocabulary()
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


def test_names_find_notes_by_title_alias_file_name_and_path(manifest: Manifest) -> None:
    manifest.notes.write(written("dir/Sub Note.md", title="Grand Title", aliases=["Nick"]), now=1.0)
    manifest.notes.write(written("other/sub note.md", title="Other"), now=1.0)
    manifest.notes.write(written("gone.md", title="Gone"), now=1.0)
    manifest.failures.record_left_out(left_out("gone.md"), when=2.0)

    names = manifest.notes.names()
    assert names.notes_named("grand title") == ("dir/Sub Note.md",)
    assert names.notes_named("NICK") == ("dir/Sub Note.md",)
    assert names.notes_named("sub-note") == ("dir/Sub Note.md", "other/sub note.md")
    assert names.notes_named("dir/sub note") == ("dir/Sub Note.md",)
    assert names.notes_named("gone") == ()
