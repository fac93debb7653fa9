"""index/names: the indexed note a name means, as Obsidian's quick switcher and links take it."""

from __future__ import annotations

from tests.storage.outcomes import written
from vaultd.index.names import note_named
from vaultd.storage.manifest import Manifest


def test_a_name_resolves_as_a_link_written_at_the_root_would(manifest: Manifest) -> None:
    manifest.apply(
        [
            written("Plugins/Canvas.md"),
            written("Archive/Old/Canvas.md"),
            written("odd#name.md"),
            written("Notes/Pier.md"),
        ]
    )
    assert note_named(manifest, "Plugins/Canvas.md") == "Plugins/Canvas.md"
    # Case-insensitive, ".md" optional, the nearest the root among notes of one name.
    assert note_named(manifest, "canvas") == "Plugins/Canvas.md"
    assert note_named(manifest, "Canvas.md") == "Plugins/Canvas.md"
    assert note_named(manifest, "Archive/Old/Canvas") == "Archive/Old/Canvas.md"
    assert note_named(manifest, "pier") == "Notes/Pier.md"
    # An exact path first: a file name may hold what a link cannot.
    assert note_named(manifest, "odd#name.md") == "odd#name.md"
    assert note_named(manifest, "Lighthouse") is None
