"""index/indexer: a pass brings the store in line with the vault, and only what changed is
read, embedded and written. A small vault, the real model, Chroma and manifest."""

from __future__ import annotations

import os
from pathlib import Path

from tests.small_vault import indexed
from vaultd.index.export import export_records
from vaultd.index.open import Index

NOTES = {
    "a.md": "# Lighthouse\n\nThe keeper climbs the lighthouse stairs at dusk.\n",
    "dir/b.md": "# Harbour\n\nGulls wheel over the pier at low tide.\n",
}


def documents(index: Index) -> dict[str, str]:
    """Each note's stored text, joined, by path."""
    out: dict[str, str] = {}
    for record in export_records(index.store):
        path = record["metadata"]["path"]
        out[path] = out.get(path, "") + record["document"]
    return out


def test_a_first_pass_indexes_every_note_and_a_second_embeds_none(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        assert sorted(documents(index)) == ["a.md", "dir/b.md"]
        assert index.indexer.found == 2
        assert index.manifest.vectors.awaiting_paths(index.indexer.model_id, list(NOTES)) == set()

        again = index.indexer.reconcile()
        # Written within a timestamp tick of their hash: read again to prove them unchanged,
        # and found so; nothing is written or embedded.
        assert (again.notes_checked, again.notes_changed, again.notes_read) == (2, 0, 2)
        assert again.chunks_embedded == 0


def test_an_edit_and_a_deletion_are_picked_up_by_path(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        note = index.vault / "a.md"
        note.write_text("# Lighthouse\n\nThe keeper now polishes the lens.\n", encoding="utf-8")
        os.utime(note, ns=(note.stat().st_mtime_ns + 10**9,) * 2)
        assert not index.indexer.is_current("a.md")

        summary = index.indexer.reconcile_paths(["a.md"])
        assert summary.notes_changed == 1
        assert summary.chunks_embedded >= 1
        assert "polishes the lens" in documents(index)["a.md"]
        assert index.indexer.is_current("a.md")

        (index.vault / "dir" / "b.md").unlink()
        assert not index.indexer.is_current("dir/b.md")
        summary = index.indexer.reconcile_paths([], dirs=["dir"])
        assert summary.notes_deleted == 1
        assert sorted(documents(index)) == ["a.md"]
        assert index.indexer.is_current("dir/b.md")
