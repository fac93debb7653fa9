"""storage/links: the note_links table, written and asked for backlinks and link sources."""

from __future__ import annotations

import sqlite3

from vaultd.records import Link
from vaultd.storage import links
from vaultd.storage.schema import Query


def link(target: str) -> Link:
    return Link(target, line=1)


def test_targets_compare_without_case_or_md() -> None:
    assert links.link_key("  Plugins/Core Plugins.MD ") == "plugins/core plugins"
    assert links.link_key("notes.md.md") == "notes.md"
    assert links.link_key("Canvas") == "canvas"


def test_backlinks_by_name_path_or_alias_but_not_from_itself(
    db: sqlite3.Connection, query: Query
) -> None:
    links.write(db, "Home.md", [link("Canvas"), link("canvas.md")])
    links.write(db, "Board.md", [link("Plugins/Canvas")])
    links.write(db, "Aliased.md", [link("The board")])
    links.write(db, "Plugins/Canvas.md", [link("Canvas")])
    links.write(db, "Other.md", [link("Gardens")])

    found = links.backlinks(query, "Plugins/Canvas.md", aliases=["the Board"])
    assert found == ["Aliased.md", "Board.md", "Home.md"]
    assert links.backlinks(query, "Gardens.md") == ["Other.md"]
    assert links.backlinks(query, "Nobody.md") == []


def test_writing_again_replaces_and_deleting_forgets(db: sqlite3.Connection, query: Query) -> None:
    links.write(db, "Home.md", [link("Canvas"), link("Gardens")])
    links.write(db, "Home.md", [link("Gardens")])
    assert links.backlinks(query, "Canvas.md") == []
    assert links.backlinks(query, "Gardens.md") == ["Home.md"]

    links.delete(db, "Home.md")
    assert links.backlinks(query, "Gardens.md") == []


def test_link_sources_are_the_notes_naming_it_as_written_or_under_a_folder(
    db: sqlite3.Connection, query: Query
) -> None:
    links.write(db, "a.md", [link("Sync")])
    links.write(db, "b.md", [link("Plugins/Sync.md")])
    links.write(db, "c.md", [link("Async")])
    links.write(db, "d.md", [link("Plugins/Sync/Setup")])
    assert links.link_sources(query, "sync") == ["a.md", "b.md"]
    # LIKE's own wildcards in a name match only themselves.
    links.write(db, "e.md", [link("x/100% done"), link("x/100_ done")])
    links.write(db, "f.md", [link("x/100 percent done"), link("x/100x done")])
    assert links.link_sources(query, "100% done") == ["e.md"]
    assert links.link_sources(query, "100_ done") == ["e.md"]
