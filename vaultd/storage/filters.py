"""The note_tags table and the filters search applies before ranking: tags (nested tags match
their parents), folders, frontmatter conditions, modification times, kinds, packages; and the
ways into the vault besides a query (tags with counts, recent notes).

The functions take the manifest's connection inside its transaction (writes) or its query
function (reads); the manifest decides when they run.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from vaultd.query import Condition
from vaultd.storage.conditions import condition_sql
from vaultd.storage.schema import Query

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


def write_tags(db: sqlite3.Connection, path: str, tags: Iterable[str]) -> None:
    db.execute("DELETE FROM note_tags WHERE path = ?", (path,))
    db.executemany(
        "INSERT INTO note_tags(tag, path) VALUES (?, ?)",
        [(t, path) for t in sorted(tag_ancestors(tags))],
    )


def delete_tags(db: sqlite3.Connection, path: str) -> None:
    db.execute("DELETE FROM note_tags WHERE path = ?", (path,))


def tag_counts(query: Query, prefix: str = "") -> list[tuple[str, int]]:
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
    return [(r[0], int(r[1])) for r in query(sql, params)]


def recent(query: Query, limit: int, since_ns: int | None = None) -> list[dict[str, Any]]:
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
        for r in query(sql, params)
    ]


def paths_matching(
    query: Query,
    tags: Sequence[str] = (),
    path_prefix: str = "",
    *,
    tags_any: Sequence[str] = (),
    conditions: Sequence[Condition] = (),
    modified_since_ns: int | None = None,
    kinds: Sequence[str] = (),
    packages: Sequence[str] = (),
) -> list[str] | None:
    """Notes passing every filter, or None when there is no filter.

    `tags` must all be present and one of `tags_any` must be (nested tags match their
    parents); `conditions` test frontmatter fields (see `Condition`); `modified_since_ns`
    compares with the file's mtime; `kinds` keeps the files indexed as one of them, and
    `packages` (lower-case) the source files of one of these packages, in any case.
    """
    if not (
        tags
        or path_prefix
        or tags_any
        or conditions
        or kinds
        or packages
        or modified_since_ns is not None
    ):
        return None
    # Failed, quarantined and left-out notes keep their last good chunks, and filters find
    # them too.
    sql = f"SELECT path FROM notes WHERE status IN {SEARCHABLE}"
    params: list[Any] = []
    for tag in tags:
        sql += " AND path IN (SELECT path FROM note_tags WHERE tag = ?)"
        params.append(tag)
    if tags_any:
        sql += (
            " AND path IN (SELECT path FROM note_tags "
            "WHERE tag IN (SELECT value FROM json_each(?)))"
        )
        params.append(json.dumps(list(tags_any), ensure_ascii=False))
    if path_prefix:
        prefix = path_prefix.strip("/")
        sql += " AND (path = ? OR substr(path, 1, ?) = ?)"
        params.extend([prefix, len(prefix) + 1, prefix + "/"])
    if modified_since_ns is not None:
        sql += " AND mtime_ns >= ?"
        params.append(modified_since_ns)
    if kinds:
        sql += " AND kind IN (SELECT value FROM json_each(?))"
        params.append(json.dumps(list(kinds)))
    if packages:
        sql += " AND lower(package) IN (SELECT value FROM json_each(?))"
        params.append(json.dumps(list(packages), ensure_ascii=False))
    for condition in conditions:
        clause, more = condition_sql(condition)
        sql += f" AND {clause}"
        params.extend(more)
    return [r[0] for r in query(sql + " ORDER BY path", params)]
