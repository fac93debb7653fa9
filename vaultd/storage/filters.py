"""The note_tags table and the filters search applies before ranking: tags (nested tags match
their parents), folders, frontmatter conditions, modification times, kinds, packages; and the
ways into the vault besides a query (tags with counts, recent notes).

`FiltersController` is the manifest's `filters`, the one writer of note_tags.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from vaultd.query import Filters
from vaultd.storage.conditions import condition_sql
from vaultd.storage.connection import Connection

#: The notes whose chunks search finds: failed, quarantined and left-out notes keep their last
#: good ones.
SEARCHABLE = "('ok', 'failed', 'quarantined', 'left_out')"


def tag_ancestors(tags: Iterable[str]) -> set[str]:
    """`a/b/c` also answers to `a` and `a/b`: nested tags match their parents."""
    out: set[str] = set()
    for tag in tags:
        parts = tag.split("/")
        out.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    return out


class FiltersController:
    """The tags of each note, and the notes passing a search's filters."""

    def __init__(self, connection: Connection) -> None:
        self._query = connection.query
        self._transaction = connection.transaction

    def write_tags(self, path: str, tags: Iterable[str]) -> None:
        rows = [(t, path) for t in sorted(tag_ancestors(tags))]
        with self._transaction() as db:
            db.execute("DELETE FROM note_tags WHERE path = ?", (path,))
            db.executemany("INSERT INTO note_tags(tag, path) VALUES (?, ?)", rows)

    def delete_tags(self, path: str) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM note_tags WHERE path = ?", (path,))

    def tag_counts(self, prefix: str = "") -> list[tuple[str, int]]:
        """Every tag with the number of notes holding it (a nested tag counts for its parents
        too), most used first; with `prefix`, only that tag and those below it."""
        sql = (
            "SELECT t.tag, COUNT(*) FROM note_tags t JOIN notes n ON n.path = t.path "
            f"WHERE n.status IN {SEARCHABLE}"
        )
        params: list[Any] = []
        if prefix:
            sql += " AND (t.tag = ? OR substr(t.tag, 1, ?) = ?)"
            params += [prefix, len(prefix) + 1, prefix + "/"]
        sql += " GROUP BY t.tag ORDER BY COUNT(*) DESC, t.tag"
        return [(r[0], int(r[1])) for r in self._query(sql, params)]

    def recent(self, limit: int, since_ns: int | None = None) -> list[dict[str, Any]]:
        """The most recently modified notes, newest first: path, title, mtime_ns and tags."""
        sql = f"SELECT path, title, mtime_ns, tags FROM notes WHERE status IN {SEARCHABLE}"
        params: list[Any] = []
        if since_ns is not None:
            sql += " AND mtime_ns >= ?"
            params.append(since_ns)
        sql += " ORDER BY mtime_ns DESC, path LIMIT ?"
        params.append(limit)
        return [
            {"path": r[0], "title": r[1] or "", "mtime_ns": r[2], "tags": json.loads(r[3] or "[]")}
            for r in self._query(sql, params)
        ]

    def matching(self, filters: Filters) -> list[str] | None:
        """The notes passing every filter, or None when there is no filter.

        Nested tags match their parents; `where` conditions test frontmatter fields (see
        `Condition`); `modified_since_ns` compares with the file's mtime; `kinds` keeps the
        files indexed as one of them, and `packages` (lower-case) the source files of one of
        these packages, in any case; `exclude_tags` and `exclude_paths` leave out what they
        name.
        """
        if not filters.active:
            return None
        # Failed, quarantined and left-out notes keep their last good chunks, and filters find
        # them too.
        sql = f"SELECT path FROM notes WHERE status IN {SEARCHABLE}"
        params: list[Any] = []
        for tag in filters.tags:
            sql += " AND path IN (SELECT path FROM note_tags WHERE tag = ?)"
            params.append(tag)
        if filters.tags_any:
            sql += (
                " AND path IN (SELECT path FROM note_tags "
                "WHERE tag IN (SELECT value FROM json_each(?)))"
            )
            params.append(json.dumps(list(filters.tags_any), ensure_ascii=False))
        if filters.path_prefix:
            prefix = filters.path_prefix.strip("/")
            sql += " AND (path = ? OR substr(path, 1, ?) = ?)"
            params.extend([prefix, len(prefix) + 1, prefix + "/"])
        if filters.modified_since_ns is not None:
            sql += " AND mtime_ns >= ?"
            params.append(filters.modified_since_ns)
        if filters.kinds:
            sql += " AND kind IN (SELECT value FROM json_each(?))"
            params.append(json.dumps(list(filters.kinds)))
        if filters.packages:
            sql += " AND lower(package) IN (SELECT value FROM json_each(?))"
            params.append(json.dumps(list(filters.packages), ensure_ascii=False))
        if filters.exclude_tags:
            sql += (
                " AND path NOT IN (SELECT path FROM note_tags "
                "WHERE tag IN (SELECT value FROM json_each(?)))"
            )
            params.append(json.dumps(list(filters.exclude_tags), ensure_ascii=False))
        for excluded in (p.strip("/") for p in filters.exclude_paths):
            sql += " AND NOT (path = ? OR substr(path, 1, ?) = ?)"
            params.extend([excluded, len(excluded) + 1, excluded + "/"])
        for condition in filters.where:
            clause, more = condition_sql(condition)
            sql += f" AND {clause}"
            params.extend(more)
        return [r[0] for r in self._query(sql + " ORDER BY path", params)]
