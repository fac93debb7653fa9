"""storage/links: the note_links table, written and asked for backlinks and link sources."""

from __future__ import annotations

from vaultd.records import Link
from vaultd.storage import links
from vaultd.storage.manifest import Manifest


def link(target: str) -> Link:
    return Link(target, line=1)


def test_targets_compare_without_case_or_md() -> None:
    assert links.link_key("  Plugins/Core Plugins.MD ") == "plugins/core plugins"
    assert links.link_key("notes.md.md") == "notes.md"
    assert links.link_key("Canvas") == "canvas"


def test_backlinks_by_name_path_or_alias_but_not_from_itself(manifest: Manifest) -> None:
    manifest.links.write("Home.md", [link("Canvas"), link("canvas.md")])
    manifest.links.write("Board.md", [link("Plugins/Canvas")])
    manifest.links.write("Aliased.md", [link("The board")])
    manifest.links.write("Plugins/Canvas.md", [link("Canvas")])
    manifest.links.write("Other.md", [link("Gardens")])

    found = manifest.links.backlinks("Plugins/Canvas.md", aliases=["the Board"])
    assert found == ["Aliased.md", "Board.md", "Home.md"]
    assert manifest.links.backlinks("Gardens.md") == ["Other.md"]
    assert manifest.links.backlinks("Nobody.md") == []


def test_writing_again_replaces_and_deleting_forgets(manifest: Manifest) -> None:
    manifest.links.write("Home.md", [link("Canvas"), link("Gardens")])
    manifest.links.write("Home.md", [link("Gardens")])
    assert manifest.links.backlinks("Canvas.md") == []
    assert manifest.links.backlinks("Gardens.md") == ["Home.md"]

    manifest.links.delete("Home.md")
    assert manifest.links.backlinks("Gardens.md") == []


def test_link_sources_are_the_notes_naming_it_as_written_or_under_a_folder(
    manifest: Manifest,
) -> None:
    manifest.links.write("a.md", [link("Sync")])
    manifest.links.write("b.md", [link("Plugins/Sync.md")])
    manifest.links.write("c.md", [link("Async")])
    manifest.links.write("d.md", [link("Plugins/Sync/Setup")])
    assert manifest.links.sources("sync") == ["a.md", "b.md"]
    # LIKE's own wildcards in a name match only themselves.
    manifest.links.write("e.md", [link("x/100% done"), link("x/100_ done")])
    manifest.links.write("f.md", [link("x/100 percent done"), link("x/100x done")])
    assert manifest.links.sources("100% done") == ["e.md"]
    assert manifest.links.sources("100_ done") == ["e.md"]
