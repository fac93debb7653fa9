"""storage/notes: the notes and chunks tables, written and read back."""

from __future__ import annotations

import sqlite3

from tests.storage.outcomes import source, written
from vaultd.records import FileState
from vaultd.storage import notes
from vaultd.storage.schema import Query


def test_a_written_note_reads_back_with_its_chunks_in_order(
    db: sqlite3.Connection, query: Query
) -> None:
    note = written("a/One.md", ["first", "second", "third"], tags=["x"], aliases=["uno"])
    notes.write(db, note, now=5.0)

    assert notes.chunk_ids(query, "a/One.md") == ["a/One.md#0", "a/One.md#1", "a/One.md#2"]
    chunks = notes.chunks_of(query, "a/One.md")
    assert [c.text for c in chunks] == ["first", "second", "third"]
    made = note.chunks[1]
    assert chunks[1].embed_text == made.embed_text
    assert (chunks[1].hash, chunks[1].headings, chunks[1].start_line) == (
        made.hash,
        made.headings,
        made.start_line,
    )
    known = notes.known(query)["a/One.md"]
    assert (known.sha256, known.ok, known.size, known.inode) == (note.sha256, True, 16, 7)
    row = notes.records(query, ["a/One.md", "absent.md"])["a/One.md"].row
    assert (row["title"], row["tags"], row["aliases"], row["status"]) == (
        "One",
        ["x"],
        ["uno"],
        "ok",
    )
    assert notes.tags_of(query, ["a/One.md"]) == {"a/One.md": ("x",)}


def test_writing_a_note_again_replaces_its_chunks(db: sqlite3.Connection, query: Query) -> None:
    notes.write(db, written("n.md", ["old one", "old two"]), now=1.0)
    notes.write(db, written("n.md", ["new"]), now=2.0)

    assert [c.text for c in notes.chunks_of(query, "n.md")] == ["new"]
    assert notes.counts(query) == ({"ok": 1}, 1)


def test_reads_by_id_and_by_path_cover_only_what_is_stored(
    db: sqlite3.Connection, query: Query
) -> None:
    notes.write(db, written("a.md", ["x", "y"]), now=1.0)
    notes.write(db, written("b.md", ["z"]), now=1.0)

    assert set(notes.chunks_by_id(query, ["a.md#1", "gone#0"])) == {"a.md#1"}
    assert notes.paths_of_chunks(query, ["a.md#0", "b.md#0", "gone#0"]) == {
        "a.md#0": "a.md",
        "b.md#0": "b.md",
    }
    assert notes.chunk_counts(query, ["a.md", "b.md", "c.md"]) == {"a.md": 2, "b.md": 1}
    assert sorted(notes.note_paths(query)) == ["a.md", "b.md"]
    assert notes.chunk_ids(query) == ["a.md#0", "a.md#1", "b.md#0"]


def test_known_subset_takes_named_paths_and_whole_folders(
    db: sqlite3.Connection, query: Query
) -> None:
    for path in ("top.md", "dir/in.md", "dir/sub/deep.md", "dirt/not.md"):
        notes.write(db, written(path), now=1.0)

    subset = notes.known_subset(query, ["top.md", "absent.md"], ["dir/"])
    assert sorted(subset) == ["dir/in.md", "dir/sub/deep.md", "top.md"]


def test_delete_removes_the_note_and_its_chunks(db: sqlite3.Connection, query: Query) -> None:
    notes.write(db, written("a.md", ["x", "y"]), now=1.0)
    notes.write(db, written("b.md"), now=1.0)
    notes.delete(db, "a.md")

    assert notes.note_paths(query) == ["b.md"]
    assert notes.chunk_ids(query) == ["b.md#0"]


def test_touch_records_a_new_stat_and_keeps_the_content(
    db: sqlite3.Connection, query: Query
) -> None:
    note = written("a.md")
    notes.write(db, note, now=1.0)
    notes.touch(db, [FileState("a.md", 9, 500, 600, 8, 700)])

    known = notes.known(query)["a.md"]
    assert (known.size, known.mtime_ns, known.ctime_ns, known.inode, known.hashed_ns) == (
        9,
        500,
        600,
        8,
        700,
    )
    assert known.sha256 == note.sha256
    assert notes.chunk_ids(query, "a.md") == ["a.md#0"]


def test_rechunk_makes_indexed_notes_look_changed_and_keeps_their_chunks(
    db: sqlite3.Connection, query: Query
) -> None:
    notes.write(db, written("a.md"), now=1.0)
    notes.write(db, written("b.md"), now=1.0)

    notes.rechunk(db, ["a.md"])
    known = notes.known(query)
    assert (known["a.md"].sha256, known["a.md"].mtime_ns) == ("", 0)
    assert known["b.md"].sha256 != ""
    assert notes.rechunk(db, None) == 2
    assert notes.known(query)["b.md"].sha256 == ""
    assert notes.chunk_counts(query, ["a.md", "b.md"]) == {"a.md": 1, "b.md": 1}


def test_kind_counts_go_by_status_and_kind(db: sqlite3.Connection, query: Query) -> None:
    notes.write(db, written("a.md"), now=1.0)
    notes.write(db, written("b.md"), now=1.0)
    db.execute("UPDATE notes SET status = 'failed' WHERE path = 'b.md'")

    assert notes.kind_counts(query) == {"note": {"ok": 1, "failed": 1}}


def test_batches_cut_a_list_into_pieces_of_at_most_size() -> None:
    assert list(notes.batches(list(range(5)), 2)) == [[0, 1], [2, 3], [4]]
    assert list(notes.batches([], 2)) == []


def test_first_chunk_ids_names_only_each_notes_first_passage(
    db: sqlite3.Connection, query: Query
) -> None:
    notes.write(db, written("a.md", ["one", "two"]), now=5.0)
    notes.write(db, written("b.md", ["three"]), now=5.0)

    asked = ["a.md#1", "b.md#0", "a.md#0", "gone.md#0"]
    assert notes.first_chunk_ids(query, asked) == {"a.md#0", "b.md#0"}
    assert notes.first_chunk_ids(query, []) == set()


def test_a_source_files_package_is_written_read_and_set_alone(
    db: sqlite3.Connection, query: Query
) -> None:
    notes.write(db, source("crates/a/src/lib.rs", "crate-a"), now=1.0)
    notes.write(db, source("crates/b/src/lib.rs", None), now=1.0)
    notes.write(db, source("tool.py", "tool"), now=1.0)
    notes.write(db, written("crates/README.md"), now=1.0)
    assert notes.packages_of(query, ["crates/a/src/lib.rs", "crates/b/src/lib.rs"]) == {
        "crates/a/src/lib.rs": "crate-a"
    }
    assert notes.records(query, ["crates/a/src/lib.rs"])["crates/a/src/lib.rs"].row["package"] == (
        "crate-a"
    )
    # Only source files, under the folders asked for ("" is the whole vault).
    assert notes.code_packages(query, ["crates"]) == {
        "crates/a/src/lib.rs": "crate-a",
        "crates/b/src/lib.rs": None,
    }
    assert notes.code_packages(query, [""]) == notes.code_packages(query)
    assert len(notes.code_packages(query)) == 3
    before = notes.chunks_of(query, "crates/b/src/lib.rs")
    notes.set_packages(db, [("crates/b/src/lib.rs", "crate-b"), ("tool.py", None)])
    assert notes.code_packages(query, ["crates/b", "tool.py"]) == {"crates/b/src/lib.rs": "crate-b"}
    assert notes.packages_of(query, ["tool.py"]) == {}
    # Nothing else of the note changes: its chunks are as they were.
    assert notes.chunks_of(query, "crates/b/src/lib.rs") == before
