"""storage/notes: the notes and chunks tables, written and read back."""

from __future__ import annotations

from tests.storage.outcomes import source, written
from vaultd.records import FileState
from vaultd.storage import notes
from vaultd.storage.manifest import Manifest


def test_a_written_note_reads_back_with_its_chunks_in_order(manifest: Manifest) -> None:
    note = written("a/One.md", ["first", "second", "third"], tags=["x"], aliases=["uno"])
    manifest.notes.write(note, now=5.0)

    assert manifest.notes.chunk_ids("a/One.md") == ["a/One.md#0", "a/One.md#1", "a/One.md#2"]
    chunks = manifest.notes.chunks_of("a/One.md")
    assert [c.chunk.text for c in chunks] == ["first", "second", "third"]
    made = note.chunks[1]
    assert chunks[1].chunk.embed_text == made.embed_text
    assert (chunks[1].chunk.hash, chunks[1].chunk.headings, chunks[1].chunk.start_line) == (
        made.hash,
        made.headings,
        made.start_line,
    )
    known = manifest.notes.known()["a/One.md"]
    assert (known.sha256, known.ok, known.size, known.inode) == (note.sha256, True, 16, 7)
    row = manifest.notes.records(["a/One.md", "absent.md"])["a/One.md"].row
    assert (row["title"], row["tags"], row["aliases"], row["status"]) == (
        "One",
        ["x"],
        ["uno"],
        "ok",
    )
    assert manifest.notes.tags_of(["a/One.md"]) == {"a/One.md": ("x",)}


def test_writing_a_note_again_replaces_its_chunks(manifest: Manifest) -> None:
    manifest.notes.write(written("n.md", ["old one", "old two"]), now=1.0)
    manifest.notes.write(written("n.md", ["new"]), now=2.0)

    assert [c.chunk.text for c in manifest.notes.chunks_of("n.md")] == ["new"]
    assert manifest.notes.status_counts() == ({"ok": 1}, 1)


def test_reads_by_id_and_by_path_cover_only_what_is_stored(manifest: Manifest) -> None:
    manifest.notes.write(written("a.md", ["x", "y"]), now=1.0)
    manifest.notes.write(written("b.md", ["z"]), now=1.0)

    assert set(manifest.notes.chunks_by_id(["a.md#1", "gone#0"])) == {"a.md#1"}
    assert manifest.notes.paths_of_chunks(["a.md#0", "b.md#0", "gone#0"]) == {
        "a.md#0": "a.md",
        "b.md#0": "b.md",
    }
    assert manifest.notes.chunk_counts(["a.md", "b.md", "c.md"]) == {"a.md": 2, "b.md": 1}
    assert sorted(manifest.notes.paths()) == ["a.md", "b.md"]
    assert manifest.notes.chunk_ids() == ["a.md#0", "a.md#1", "b.md#0"]


def test_known_subset_takes_named_paths_and_whole_folders(manifest: Manifest) -> None:
    for path in ("top.md", "dir/in.md", "dir/sub/deep.md", "dirt/not.md"):
        manifest.notes.write(written(path), now=1.0)

    subset = manifest.notes.known_subset(["top.md", "absent.md"], ["dir/"])
    assert sorted(subset) == ["dir/in.md", "dir/sub/deep.md", "top.md"]


def test_delete_removes_the_note_and_its_chunks(manifest: Manifest) -> None:
    manifest.notes.write(written("a.md", ["x", "y"]), now=1.0)
    manifest.notes.write(written("b.md"), now=1.0)
    manifest.notes.delete("a.md")

    assert manifest.notes.paths() == ["b.md"]
    assert manifest.notes.chunk_ids() == ["b.md#0"]


def test_touch_records_a_new_stat_and_keeps_the_content(manifest: Manifest) -> None:
    note = written("a.md")
    manifest.notes.write(note, now=1.0)
    manifest.notes.touch([FileState("a.md", 9, 500, 600, 8, 700)])

    known = manifest.notes.known()["a.md"]
    assert (known.size, known.mtime_ns, known.ctime_ns, known.inode, known.hashed_ns) == (
        9,
        500,
        600,
        8,
        700,
    )
    assert known.sha256 == note.sha256
    assert manifest.notes.chunk_ids("a.md") == ["a.md#0"]


def test_rechunk_makes_indexed_notes_look_changed_and_keeps_their_chunks(
    manifest: Manifest,
) -> None:
    manifest.notes.write(written("a.md"), now=1.0)
    manifest.notes.write(written("b.md"), now=1.0)

    manifest.notes.rechunk(["a.md"])
    known = manifest.notes.known()
    assert (known["a.md"].sha256, known["a.md"].mtime_ns) == ("", 0)
    assert known["b.md"].sha256 != ""
    assert manifest.notes.rechunk(None) == 2
    assert manifest.notes.known()["b.md"].sha256 == ""
    assert manifest.notes.chunk_counts(["a.md", "b.md"]) == {"a.md": 1, "b.md": 1}


def test_kind_counts_go_by_status_and_kind(manifest: Manifest) -> None:
    manifest.notes.write(written("a.md"), now=1.0)
    manifest.notes.write(written("b.md"), now=1.0)
    with manifest.transaction() as db:
        db.execute("UPDATE notes SET status = 'failed' WHERE path = 'b.md'")

    assert manifest.notes.kind_counts() == {"note": {"ok": 1, "failed": 1}}


def test_batches_cut_a_list_into_pieces_of_at_most_size() -> None:
    assert list(notes.batches(list(range(5)), 2)) == [[0, 1], [2, 3], [4]]
    assert list(notes.batches([], 2)) == []


def test_first_chunk_ids_names_only_each_notes_first_passage(manifest: Manifest) -> None:
    manifest.notes.write(written("a.md", ["one", "two"]), now=5.0)
    manifest.notes.write(written("b.md", ["three"]), now=5.0)

    assert manifest.notes.first_chunk_ids() == {"a.md#0", "b.md#0"}
    manifest.notes.delete("a.md")
    assert manifest.notes.first_chunk_ids() == {"b.md#0"}


def test_a_source_files_package_is_written_read_and_set_alone(manifest: Manifest) -> None:
    manifest.notes.write(source("crates/a/src/lib.rs", "crate-a"), now=1.0)
    manifest.notes.write(source("crates/b/src/lib.rs", None), now=1.0)
    manifest.notes.write(source("tool.py", "tool"), now=1.0)
    manifest.notes.write(written("crates/README.md"), now=1.0)
    assert manifest.notes.packages_of(["crates/a/src/lib.rs", "crates/b/src/lib.rs"]) == {
        "crates/a/src/lib.rs": "crate-a"
    }
    assert manifest.notes.row("crates/a/src/lib.rs")["package"] == "crate-a"  # type: ignore[index]
    # Only source files, under the folders asked for ("" is the whole vault).
    assert manifest.notes.code_packages(["crates"]) == {
        "crates/a/src/lib.rs": "crate-a",
        "crates/b/src/lib.rs": None,
    }
    assert manifest.notes.code_packages([""]) == manifest.notes.code_packages()
    assert len(manifest.notes.code_packages()) == 3
    before = manifest.notes.chunks_of("crates/b/src/lib.rs")
    manifest.notes.set_packages({"crates/b/src/lib.rs": "crate-b", "tool.py": None})
    assert manifest.notes.code_packages(["crates/b", "tool.py"]) == {
        "crates/b/src/lib.rs": "crate-b"
    }
    assert manifest.notes.packages_of(["tool.py"]) == {}
    # Nothing else of the note changes: its chunks are as they were.
    assert manifest.notes.chunks_of("crates/b/src/lib.rs") == before
