"""storage/schema: the tables and keyword indexes, the version, and migrations in place."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from tests.storage.outcomes import source, written
from vaultd.errors import StoreError
from vaultd.layout import MANIFEST
from vaultd.records import NoteWritten
from vaultd.storage import schema
from vaultd.storage.manifest import Manifest
from vaultd.storage.schema import SCHEMA_VERSION


def _open(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA synchronous=OFF")
    schema.register(db)
    schema.create_or_migrate(db, path)
    return db


def test_a_new_file_gets_every_table_at_the_current_version(tmp_path: Path) -> None:
    db = _open(tmp_path / "m.db")
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"meta", "notes", "chunks", "vectors", "in_flight", "suspects", "note_tags"} <= tables
    assert {"note_links", "chunks_fts", "chunks_pairs", "chunks_vocab"} <= tables
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    pairs = db.execute("SELECT value FROM meta WHERE key = 'pairs_version'").fetchone()
    assert pairs == (schema.PAIRS_VERSION,)
    # Opening it again changes nothing.
    db.close()
    _open(tmp_path / "m.db").close()


def test_a_file_of_a_newer_vaultd_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.close()

    with pytest.raises(StoreError, match="newer vaultd"):
        _open(path)
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
    db.close()


def _written(data_dir: Path, *made: NoteWritten) -> sqlite3.Connection:
    """A manifest in `data_dir` holding these notes, open bare to be made older by hand."""
    manifest = Manifest(data_dir)
    for note in made:
        manifest.notes.write(note, now=1.0)
    manifest.close()
    return _open(data_dir / MANIFEST)


def test_the_keyword_indexes_follow_chunks_written_and_deleted(manifest: Manifest) -> None:
    manifest.notes.write(written("a.md", ["running water", "水を飲む"]), now=1.0)
    assert [h[0] for h in manifest.keyword.bm25("run", 5)] == ["a.md#0"]
    assert [h[0] for h in manifest.keyword.bm25('"飲む"', 5, index="pairs")] == ["a.md#1"]

    manifest.notes.delete("a.md")
    assert manifest.keyword.bm25("run", 5) == []
    assert manifest.keyword.bm25('"飲む"', 5, index="pairs") == []


def test_an_older_file_is_migrated_keeping_its_notes(tmp_path: Path) -> None:
    """A schema 9 file (no kinds, no locations) gains them; nothing else changes."""
    db = _written(tmp_path, written("a.md", ["kept words"]))
    for table, column in (("notes", "kind"), ("chunks", "page"), ("chunks", "symbol")):
        db.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    db.execute("PRAGMA user_version=9")
    db.close()

    with closing(Manifest(tmp_path)) as manifest:
        assert manifest.query("PRAGMA user_version") == [(SCHEMA_VERSION,)]
        [chunk] = manifest.notes.chunks_of("a.md")
        assert (chunk.chunk.text, chunk.chunk.location.page, chunk.chunk.location.symbol) == (
            "kept words",
            None,
            None,
        )
        assert manifest.notes.kinds_of(["a.md"]) == {"a.md": "note"}
        assert [h[0] for h in manifest.keyword.bm25("kept", 5)] == ["a.md#0"]


def test_a_schema_10_file_gains_the_notes_package_in_place(tmp_path: Path) -> None:
    """Its source files have no package until a full pass names it; nothing else changes."""
    db = _written(tmp_path, source("src/lib.rs", "crate", ["fn kept() {}"]))
    db.execute("ALTER TABLE notes DROP COLUMN package")
    db.execute("PRAGMA user_version=10")
    db.close()

    with closing(Manifest(tmp_path)) as manifest:
        assert manifest.query("PRAGMA user_version") == [(SCHEMA_VERSION,)]
        assert SCHEMA_VERSION == 11
        assert manifest.notes.code_packages() == {"src/lib.rs": None}
        assert [c.chunk.text for c in manifest.notes.chunks_of("src/lib.rs")] == ["fn kept() {}"]
        assert manifest.notes.kinds_of(["src/lib.rs"]) == {"src/lib.rs": "code"}


def test_a_schema_1_file_has_its_keyword_index_rebuilt_from_the_chunks(tmp_path: Path) -> None:
    db = _written(tmp_path, written("a.md", ["running water"], aliases=["Stream"]))
    # Schema 1's index did not stem and had no aliases: dropped, it must be made again.
    db.executescript("DROP TABLE chunks_fts; DROP TABLE chunks_pairs;")
    db.execute("PRAGMA user_version=1")
    db.close()

    with closing(Manifest(tmp_path)) as manifest:
        assert [h[0] for h in manifest.keyword.bm25("run", 5)] == ["a.md#0"]
        assert [h[0] for h in manifest.keyword.bm25("stream", 5)] == ["a.md#0"]


def test_pairs_made_another_way_are_rebuilt_at_the_next_open(tmp_path: Path) -> None:
    db = _written(tmp_path, written("a.md", ["水を飲む"]))
    db.execute("UPDATE meta SET value = 'pairs-0' WHERE key = 'pairs_version'")
    # The terms made the old way are gone with it: only a rebuild finds the note again.
    db.execute("INSERT INTO chunks_pairs(chunks_pairs) VALUES ('delete-all')")
    db.close()

    with closing(Manifest(tmp_path)) as manifest:
        assert [h[0] for h in manifest.keyword.bm25('"飲む"', 5, index="pairs")] == ["a.md#0"]
        assert manifest.get_meta("pairs_version") == schema.PAIRS_VERSION


def test_a_failed_migration_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    db = _open(path)
    with pytest.raises(sqlite3.Error):
        schema._run(db, "BEGIN IMMEDIATE;\nCREATE TABLE extra (x);\nSELECT * FROM nowhere;\n")
    assert not db.in_transaction
    assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'extra'").fetchone() == (0,)


SCHEMA_2 = """
CREATE TABLE notes (path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL, status TEXT NOT NULL, error TEXT, attempts INTEGER NOT NULL DEFAULT 0,
    title TEXT NOT NULL DEFAULT '', aliases TEXT NOT NULL DEFAULT '[]',
    tags TEXT NOT NULL DEFAULT '[]', links TEXT NOT NULL DEFAULT '[]',
    frontmatter TEXT NOT NULL DEFAULT '{}', indexed_at REAL NOT NULL);
CREATE TABLE chunks (n INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, path TEXT NOT NULL,
    idx INTEGER NOT NULL, hash TEXT NOT NULL, title TEXT NOT NULL, section TEXT NOT NULL,
    headings TEXT NOT NULL, start_line INTEGER NOT NULL, end_line INTEGER NOT NULL,
    tokens INTEGER NOT NULL, text TEXT NOT NULL);
CREATE TABLE vectors (model TEXT NOT NULL, hash TEXT NOT NULL, vector BLOB NOT NULL,
    PRIMARY KEY (model, hash));
CREATE VIRTUAL TABLE chunks_fts USING fts5(title, section, text, content='chunks',
    content_rowid='n', tokenize='porter unicode61 remove_diacritics 2');
CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, title, section, text)
    VALUES (new.n, new.title, new.section, new.text);
END;
CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, title, section, text)
    VALUES ('delete', old.n, old.title, old.section, old.text);
END;
PRAGMA user_version = 2;
"""


def test_schema_2_is_migrated_by_rebuilding_the_keyword_index(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "vaultd.db")
    db.executescript(SCHEMA_2)
    db.execute(
        "INSERT INTO notes(path, size, mtime_ns, sha256, status, title, aliases, indexed_at) "
        "VALUES ('a.md', 1, 1, 'x', 'ok', 'Alpha', '[\"First letter\"]', 0)"
    )
    for n, text in enumerate(["plain words here", "同步设置与版本历史"]):
        db.execute(
            "INSERT INTO chunks(id, path, idx, hash, title, section, headings, start_line, "
            "end_line, tokens, text) VALUES (?, 'a.md', ?, ?, 'Alpha', '', '[]', ?, ?, 3, ?)",
            (f"c{n}", n, f"h{n}", n + 1, n + 1, text),
        )
    db.execute("INSERT INTO vectors VALUES ('m', 'h0', x'00000000')")
    db.commit()
    db.close()

    manifest = Manifest(tmp_path)
    try:
        assert manifest.get_meta("x") is None
        version = sqlite3.connect(tmp_path / "vaultd.db").execute("PRAGMA user_version")
        assert version.fetchone()[0] == SCHEMA_VERSION
        assert manifest.keyword.bm25('"first" OR "letter"', 5) != []  # aliases are indexed now
        assert [i for i, _ in manifest.keyword.bm25('"版本 本历"', 5, index="pairs")] == ["c1"]
        assert [i for i, _ in manifest.keyword.substring(["同步"], 5)] == ["c1"]
        assert len(manifest.vectors.get("m", ["h0"])) == 1  # nothing re-embedded or dropped
    finally:
        manifest.close()
    # Opening again is a no-op.
    Manifest(tmp_path).close()
