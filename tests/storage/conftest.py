from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from vaultd.storage.manifest import Manifest
from vaultd.storage.schema import Query, create_or_migrate, register


@pytest.fixture
def manifest(tmp_path: Path) -> Iterator[Manifest]:
    """A new manifest in its own data directory, closed after the test."""
    opened = Manifest(tmp_path / "data")
    yield opened
    opened.close()


@pytest.fixture
def db(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    """A bare connection to a new manifest file with the schema (no `Manifest` around it),
    in autocommit: the table modules' functions are called on it directly."""
    path = tmp_path / "manifest.sqlite"
    connection = sqlite3.connect(path, isolation_level=None)
    # Nothing here must outlive a crash of the machine: no fsync keeps these tests fast.
    connection.execute("PRAGMA synchronous=OFF")
    register(connection)
    create_or_migrate(connection, path)
    yield connection
    connection.close()


@pytest.fixture
def query(db: sqlite3.Connection) -> Query:
    """The read function the table modules take, on `db`."""

    def run(sql: str, params: Sequence[Any]) -> list[Any]:
        return db.execute(sql, params).fetchall()

    return run
