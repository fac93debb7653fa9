"""storage/connection: the file opened (WAL, migrated), one writer, pooled readers, and
sqlite3's errors translated where they occur."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from vaultd.errors import DataDirError, StoreError
from vaultd.storage.connection import Connection
from vaultd.storage.schema import SCHEMA_VERSION


def test_a_new_file_is_made_in_wal_mode_at_the_current_schema(tmp_path: Path) -> None:
    opened = Connection(tmp_path / "new" / "m.db")
    try:
        assert opened.query("PRAGMA journal_mode") == [("wal",)]
        assert opened.query("PRAGMA user_version") == [(SCHEMA_VERSION,)]
    finally:
        opened.close()


def test_a_transaction_commits_whole_or_not_at_all(tmp_path: Path) -> None:
    opened = Connection(tmp_path / "m.db")
    try:
        with opened.transaction() as db:
            db.execute("INSERT INTO meta VALUES ('a', '1')")
        with pytest.raises(RuntimeError), opened.transaction() as db:
            db.execute("INSERT INTO meta VALUES ('b', '2')")
            raise RuntimeError("half-way")
        assert opened.query("SELECT key FROM meta WHERE key IN ('a', 'b')") == [("a",)]
        # Every transaction counts as a write, the undone one too: snapshots are read again.
        assert opened.writes == 2
    finally:
        opened.close()


def test_a_transaction_within_another_joins_it(tmp_path: Path) -> None:
    opened = Connection(tmp_path / "m.db")
    try:
        with opened.transaction() as outer:
            outer.execute("INSERT INTO meta VALUES ('a', '1')")
            with opened.unsynced_transaction() as inner:
                inner.execute("INSERT INTO meta VALUES ('b', '2')")
        assert opened.writes == 1
        with pytest.raises(RuntimeError), opened.transaction() as outer:
            with opened.transaction() as inner:
                inner.execute("INSERT INTO meta VALUES ('c', '3')")
            raise RuntimeError("after the inner one ended")
        # The inner one was undone with the outer: it had committed nothing of its own.
        assert opened.query("SELECT key FROM meta WHERE key IN ('a', 'b', 'c')") == [("a",), ("b",)]
        assert opened.writes == 2
    finally:
        opened.close()


def test_a_reader_left_in_a_transaction_is_not_used_again(tmp_path: Path) -> None:
    """A read connection whose transaction did not end (a snapshot's end failed) went back to
    the pool and answered every later read from that old commit."""
    opened = Connection(tmp_path / "m.db")
    try:
        with opened._reader() as db:
            db.execute("BEGIN")
            db.execute("SELECT COUNT(*) FROM meta").fetchall()
        with opened.transaction() as db:
            db.execute("INSERT INTO meta VALUES ('a', '1')")
        assert opened.query("SELECT key FROM meta WHERE key = 'a'") == [("a",)]
    finally:
        opened.close()


def test_sqlite_errors_become_store_errors(tmp_path: Path) -> None:
    opened = Connection(tmp_path / "m.db")
    try:
        with pytest.raises(StoreError, match="no such table"):
            opened.query("SELECT * FROM nowhere")
        with pytest.raises(StoreError, match="UNIQUE"), opened.transaction() as db:
            db.execute("INSERT INTO meta VALUES ('a', '1')")
            db.execute("INSERT INTO meta VALUES ('a', '2')")
        # Readers write nothing, even asked to.
        with pytest.raises(StoreError, match="readonly"):
            opened.query("INSERT INTO meta VALUES ('x', 'y')")
    finally:
        opened.close()


def test_a_damaged_file_is_a_data_dir_error_that_says_to_move_it_aside(tmp_path: Path) -> None:
    path = tmp_path / "data" / "m.db"
    path.parent.mkdir()
    path.write_bytes(b"this is no database " * 400)
    with pytest.raises(DataDirError, match="mv ") as refused:
        Connection(path)
    assert refused.value.path == str(path.parent)


def test_a_file_replaced_while_open_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    opened = Connection(path)
    try:
        opened.READERS = 0  # every read opens a connection, and so checks the file
        replacement = tmp_path / "other.db"
        sqlite3.connect(replacement).close()
        os.replace(replacement, path)
        assert opened.file_identity()[0] != opened.file_identity()[1]
        with pytest.raises(StoreError, match="deleted or replaced"):
            opened.query("SELECT 1")
    finally:
        opened.close()


def test_trace_sees_the_statements_of_writer_and_readers(tmp_path: Path) -> None:
    opened = Connection(tmp_path / "m.db")
    seen: list[str] = []
    try:
        opened.trace(seen.append)
        opened.query("SELECT count(*) FROM notes")
        with opened.transaction() as db:
            db.execute("DELETE FROM meta WHERE key = 'none'")
        opened.trace(None)
        opened.query("SELECT 2")
    finally:
        opened.close()
    assert "SELECT count(*) FROM notes" in seen
    assert "DELETE FROM meta WHERE key = 'none'" in seen
    assert "SELECT 2" not in seen
