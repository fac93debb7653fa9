"""index/keyword_phase: each new or changed note committed to the manifest at once, searchable
by its words before any vector is made; a moved note keeps its vectors; a deleted one is
forgotten."""

from __future__ import annotations

from pathlib import Path

from tests.index.phases import keyword_pass, paths_in_store
from tests.small_vault import indexed

NOTES = {
    "a.md": "# A\n\nThe keeper climbs the stairs.\n",
    "b.md": "# B\n\nGulls at low tide over the pier.\n",
}


def test_a_new_note_is_committed_and_awaits_its_vectors(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        (index.vault / "c.md").write_text("# C\n\nThe lantern room.\n", encoding="utf-8")
        embedded = index.embedder.embedded

        summary = keyword_pass(index)

        assert summary.notes_changed == 1
        assert index.embedder.embedded == embedded  # nothing embedded in this phase
        assert "c.md" in index.manifest.notes.paths()
        assert index.manifest.vectors.awaiting_paths(index.indexer.model_id, ["c.md"]) == {"c.md"}
        assert "c.md" not in paths_in_store(index)


def test_a_moved_note_is_published_with_the_vectors_it_had(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        (index.vault / "b.md").rename(index.vault / "moved.md")
        embedded = index.embedder.embedded

        summary = keyword_pass(index)

        assert (summary.notes_moved, summary.notes_changed) == (1, 0)
        assert summary.chunks_reused >= 1
        assert index.embedder.embedded == embedded
        assert paths_in_store(index) == {"a.md", "moved.md"}
        assert "b.md" not in index.manifest.notes.paths()


def test_a_deleted_note_loses_its_chunks(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        chunks = len(index.manifest.notes.chunk_ids("a.md"))
        (index.vault / "a.md").unlink()

        summary = keyword_pass(index)

        assert (summary.notes_deleted, summary.chunks_deleted) == (1, chunks)
        assert index.manifest.notes.paths() == ["b.md"]
        assert paths_in_store(index) == {"b.md"}
