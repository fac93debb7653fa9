"""index/prepare: each changed note read (or taken as read since the scan), parsed and chunked,
with the chunks recorded at its path and, for a move, those it had and their vectors."""

from __future__ import annotations

from pathlib import Path

from tests.index.phases import detected
from tests.small_vault import indexed
from vaultd.records import NoteLeftOut, Prepared

NOTES = {
    "a.md": "# A\n\nThe keeper climbs the stairs.\n",
    # Titled by its file name: chunked again under a new name, its texts would change.
    "b.md": "Gulls at low tide over the pier.\n",
}


def test_an_edited_note_is_chunked_with_the_ids_it_had(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        (index.vault / "a.md").write_text("# A\n\nThe keeper rests.\n", encoding="utf-8")
        hashed = detected(index)
        changes, kept = hashed.changes, hashed.kept
        change = next(c for c in changes if c.path == "a.md")
        marked: list[str] = []

        [(_, prepared)] = index.indexer.preparer.all([change], marked, None, kept, set())

        assert isinstance(prepared, Prepared)
        assert marked == ["a.md"] and index.manifest.failures.in_flight() == ["a.md"]
        assert prepared.old_ids == index.manifest.notes.chunk_ids("a.md")
        assert "The keeper rests." in prepared.chunks[0].text
        assert "a.md" not in kept  # the bytes read by the scan were taken, not read again


def test_a_moved_note_keeps_its_chunks_and_vectors_under_new_ids(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        old = index.manifest.notes.chunks_of("b.md")
        (index.vault / "b.md").rename(index.vault / "c.md")
        hashed = detected(index)
        changes, kept = hashed.changes, hashed.kept
        [change] = [c for c in changes if c.kind == "moved"]

        prepared = index.indexer.preparer.one(change, kept.get("c.md"))

        assert isinstance(prepared, Prepared)
        assert prepared.moved_ids == [c.chunk.id for c in old]
        assert set(prepared.vectors) == {c.chunk.hash for c in old}
        assert [c.hash for c in prepared.chunks] == [c.chunk.hash for c in old]
        assert all(c.id not in prepared.moved_ids for c in prepared.chunks)


def test_bytes_written_since_the_scan_are_read_again(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        (index.vault / "a.md").write_text("# A\n\nFirst edit.\n", encoding="utf-8")
        hashed = detected(index)
        changes, kept = hashed.changes, hashed.kept
        change = next(c for c in changes if c.path == "a.md")
        (index.vault / "a.md").write_text("# A\n\nA second, longer edit.\n", encoding="utf-8")

        prepared = index.indexer.preparer.one(change, kept["a.md"])

        assert isinstance(prepared, Prepared)
        assert "second, longer edit" in prepared.chunks[0].text
        assert prepared.change.sha256 != change.sha256


def test_a_binary_file_is_left_out(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        (index.vault / "a.md").write_bytes(b"binary\x00bytes")
        hashed = detected(index)
        changes, kept = hashed.changes, hashed.kept
        change = next(c for c in changes if c.path == "a.md")

        outcome = index.indexer.preparer.one(change, kept.get("a.md"))

        assert isinstance(outcome, NoteLeftOut)
        assert outcome.kind == "binary"
