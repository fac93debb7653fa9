"""The note_links table: which notes link to which names, for backlinks and for resolving
links as Obsidian does.

`LinksController` is the manifest's `links`, the table's one writer.
"""

from __future__ import annotations

from collections.abc import Iterable

from vaultd.records import Link
from vaultd.storage.connection import Connection
from vaultd.storage.notes import NotesController


def link_key(target: str) -> str:
    """How link targets are compared: case-insensitive, with or without ".md"."""
    key = target.strip().lower()
    return key[:-3] if key.endswith(".md") else key


class LinksController:
    """The links between notes: who links to a note, and which notes a name can mean."""

    def __init__(self, connection: Connection, notes: NotesController) -> None:
        self._query = connection.query
        self._transaction = connection.transaction
        self._connection = connection
        self._notes = notes
        #: The notes by file name, as of a count of writes.
        self._names: tuple[int, dict[str, list[str]]] = (-1, {})

    def write(self, path: str, links: Iterable[Link]) -> None:
        rows = [(link_key(link.target), path) for link in links]
        with self._transaction() as db:
            db.execute("DELETE FROM note_links WHERE source = ?", (path,))
            db.executemany("INSERT OR IGNORE INTO note_links(target, source) VALUES (?, ?)", rows)

    def delete(self, path: str) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM note_links WHERE source = ?", (path,))

    def backlinks(self, path: str, aliases: Iterable[str] = ()) -> list[str]:
        """Notes linking to `path` by its name, its path or one of its aliases."""
        stem = path[:-3] if path.lower().endswith(".md") else path
        keys = {link_key(stem), link_key(stem.rsplit("/", 1)[-1])}
        keys.update(link_key(a) for a in aliases)
        marks = ",".join("?" * len(keys))
        rows = self._query(
            f"SELECT DISTINCT source FROM note_links WHERE target IN ({marks}) AND source != ? "
            "ORDER BY source",
            [*sorted(keys), path],
        )
        return [r[0] for r in rows]

    def sources(self, name: str) -> list[str]:
        """The notes with a link whose target names `name` (lower-cased, without ".md"), as
        written or under a folder: every note that may link to a note of that name."""
        pattern = "%/" + name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = self._query(
            "SELECT DISTINCT source FROM note_links WHERE target = ? OR target LIKE ? ESCAPE '\\' "
            "ORDER BY source",
            (name, pattern),
        )
        return [r[0] for r in rows]

    def paths_named(self, names: Iterable[str]) -> list[str]:
        """The notes whose file name (lower-cased, without ".md") is one of `names`: every
        note a link to one of those names can resolve to. The index of names is kept until
        the next write."""
        # Counted before the read: a write meanwhile makes the next call read.
        writes = self._connection.writes
        seen, by_name = self._names
        if seen != writes:
            by_name = {}
            for path in self._notes.paths():
                # Keyed as `LinkResolver` keys them, so the two find the same notes.
                by_name.setdefault(link_key(path).rsplit("/", 1)[-1], []).append(path)
            self._names = (writes, by_name)
        return [path for name in {n.lower() for n in names} for path in by_name.get(name, [])]
