"""storage/conditions: frontmatter conditions compiled to SQL over `notes.frontmatter`."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from vaultd.query import Condition
from vaultd.storage.conditions import condition_sql

FRONTMATTER: dict[str, dict[str, Any]] = {
    "a": {"status": "Done", "rank": 3, "due": "2024-05-01T10:00:00", "flag": True},
    "b": {"status": ["draft", "done"], "rank": "5", "flag": None},
    "c": {"status": "open", "rank": 7.5, "due": "2024-06-01", "flag": False},
}


@pytest.fixture(scope="module")
def table() -> Iterator[sqlite3.Connection]:
    """The one column the clauses read, in an in-memory database."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE notes (path TEXT, frontmatter TEXT)")
    db.executemany(
        "INSERT INTO notes VALUES (?, ?)", [(p, json.dumps(f)) for p, f in FRONTMATTER.items()]
    )
    yield db
    db.close()


def _where(db: sqlite3.Connection, field: str, op: Any, value: Any) -> list[str]:
    clause, params = condition_sql(Condition(field, op, value))
    rows = db.execute(f"SELECT path FROM notes WHERE {clause} ORDER BY path", params)
    return [r[0] for r in rows]


@pytest.mark.parametrize(
    ("field", "op", "value", "paths"),
    [
        # Text compares without case, and a list passes when any item does.
        ("status", "eq", "done", ["a", "b"]),
        ("status", "in", ("open", "draft"), ["b", "c"]),
        ("status", "in", (), []),
        # Numbers compare with numbers and with their text forms.
        ("rank", "eq", 5, ["b"]),
        ("rank", "eq", 3.0, ["a"]),
        ("rank", "eq", "7.5", ["c"]),
        ("rank", "gt", 3, ["c"]),
        ("rank", "gte", 3, ["a", "c"]),
        # A date compares the day a value falls on; a time compares the instant.
        ("due", "lte", "2024-05-01", ["a"]),
        ("due", "gt", "2024-05-01T12:00:00", ["c"]),
        ("flag", "eq", True, ["a"]),
        ("flag", "eq", False, ["c"]),
        ("flag", "eq", None, ["b"]),
        ("missing", "eq", None, []),
    ],
)
def test_a_condition_selects_the_notes_it_describes(
    table: sqlite3.Connection, field: str, op: Any, value: Any, paths: list[str]
) -> None:
    assert _where(table, field, op, value) == paths
