"""index/notes: an indexed note as the API shows it, its links resolved, its backlinks and its
chunks."""

from __future__ import annotations

from tests.storage.outcomes import written
from vaultd.index.notes import note_view
from vaultd.storage.manifest import Manifest


def test_a_note_comes_with_its_links_resolved_backlinks_and_chunks(manifest: Manifest) -> None:
    manifest.apply(
        [
            written("a.md", ["one", "two"], tags=["sea"], links=["Pier", "Nowhere"]),
            written("places/Pier.md", links=["a"]),
        ]
    )
    view = note_view(manifest, "a.md")
    assert view is not None
    assert "mtime_ns" not in view
    assert [(link["target"], link["path"]) for link in view["links"]] == [
        ("Pier", "places/Pier.md"),
        ("Nowhere", None),
    ]
    assert view["backlinks"] == ["places/Pier.md"]
    assert [c["text"] for c in view["chunks"]] == ["one", "two"]
    assert view["tags"] == ["sea"]


def test_a_note_not_indexed_has_no_view(manifest: Manifest) -> None:
    assert note_view(manifest, "absent.md") is None
