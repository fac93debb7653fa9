"""The note_links table: which notes link to which names, for backlinks and for resolving
links as Obsidian does.

The functions take the manifest's connection inside its transaction (writes) or its query
function (reads); the manifest decides when they run.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from vaultd.records import Link
from vaultd.storage.schema import Query


def link_key(target: str) -> str:
    """How link targets are compared: case-insensitive, with or without ".md"."""
    key = target.strip().lower()
    return key[:-3] if key.endswith(".md") else key


def write(db: sqlite3.Connection, path: str, links: Iterable[Link]) -> None:
    db.execute("DELETE FROM note_links WHERE source = ?", (path,))
    db.executemany(
        "INSERT OR IGNORE INTO note_links(target, source) VALUES (?, ?)",
        [(link_key(link.target), path) for link in links],
    )


def delete(db: sqlite3.Connection, path: str) -> None:
    db.execute("DELETE FROM note_links WHERE source = ?", (path,))


def backlinks(query: Query, path: str, aliases: Iterable[str] = ()) -> list[str]:
    """Notes linking to `path` by its name, its path or one of its aliases."""
    stem = path[:-3] if path.lower().endswith(".md") else path
    keys = {link_key(stem), link_key(stem.rsplit("/", 1)[-1])}
    keys.update(link_key(a) for a in aliases)
    marks = ",".join("?" * len(keys))
    rows = query(
        f"SELECT DISTINCT source FROM note_links WHERE target IN ({marks}) AND source != ? "
        "ORDER BY source",
        [*sorted(keys), path],
    )
    return [r[0] for r in rows]


def link_sources(query: Query, name: str) -> list[str]:
    """The notes with a link whose target names `name` (lower-cased, without ".md"), as
    written or under a folder: every note that may link to a note of that name."""
    pattern = "%/" + name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    rows = query(
        "SELECT DISTINCT source FROM note_links WHERE target = ? OR target LIKE ? ESCAPE '\\' "
        "ORDER BY source",
        (name, pattern),
    )
    return [r[0] for r in rows]
