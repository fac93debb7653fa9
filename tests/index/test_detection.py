"""index/detection: a walk compared with the manifest, the candidates hashed and classified,
the bytes read kept for the parser, and an unreadable note left out, not failed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.small_vault import indexed
from vaultd.errors import LeftOutError
from vaultd.index.detection import sha256_file
from vaultd.index.passes import quiet

NOTES = {
    "a.md": "# A\n\nThe keeper climbs the stairs.\n",
    "b.md": "# B\n\nGulls at low tide over the pier.\n",
}


def test_new_edited_and_moved_notes_are_classified_and_their_bytes_kept(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        vault, detection = index.vault, index.indexer.detection
        (vault / "c.md").write_text("# C\n\nA new note.\n", encoding="utf-8")
        (vault / "a.md").write_text("# A\n\nThe keeper rests.\n", encoding="utf-8")
        (vault / "b.md").rename(vault / "moved.md")
        known = index.manifest.notes.known()

        scanned = detection.scan(known, index.indexer.discovery.walk(), full=True, verify=())
        assert scanned.summary.notes_seen == 3
        # The note gone is found until the pass has forgotten it: it is still indexed.
        assert detection.found == {"a.md", "b.md", "c.md", "moved.md"}
        detection.forgotten(scanned.went)
        assert detection.found == {"a.md", "c.md", "moved.md"}

        hashed = detection.hash(scanned.scan, known, quiet)
        changes, weights, kept = hashed.changes, hashed.weights, hashed.kept
        kinds = {c.path: (c.kind, c.old_path) for c in changes if c.kind != "verified"}
        assert kinds == {
            "a.md": ("modified", None),
            "c.md": ("created", None),
            "moved.md": ("moved", "b.md"),
        }
        data, state = kept["c.md"]
        assert data == (vault / "c.md").read_bytes()
        assert state.path == "c.md" and state.hashed_ns > 0
        sha = {c.path: c.sha256 for c in changes}
        assert sha["c.md"] == sha256_file(data)
        assert set(weights) >= {"a.md", "c.md", "moved.md"}


def test_a_note_that_cannot_be_read_is_left_out(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        reader = index.indexer.reader
        reads = reader.reads
        with pytest.raises(LeftOutError) as raised:
            reader.read("missing.md")
        assert raised.value.kind == "unreadable"
        assert reader.reads == reads + 1


def test_unchanged_since_holds_until_the_file_is_written(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        reader = index.indexer.reader
        _, state = reader.read("a.md")
        assert reader.unchanged_since(state)
        (index.vault / "a.md").write_text("# A\n\nOther words, other size.\n", encoding="utf-8")
        assert not reader.unchanged_since(state)
        assert not reader.unchanged_since(state.__class__("gone.md", 1, 1))
