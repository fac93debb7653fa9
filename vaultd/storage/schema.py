"""The manifest's schema: its tables, its keyword indexes and their triggers, the schema
version, and the migrations from every older version.

`create_or_migrate` brings any file this vaultd can read to `SCHEMA_VERSION` in place, in one
transaction, and refuses a newer one. A migration never embeds anything again: the keyword
indexes are rebuilt from the stored chunks, added tables and columns start empty.

The bottom of the manifest's modules: it imports none of them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from vaultd.errors import StoreError
from vaultd.query import UNSPACED_RANGES, cjk_terms

#: Runs one read-only statement on the manifest and returns its rows (`Connection.query`, which
#: translates sqlite3's errors).
Query = Callable[[str, Sequence[Any]], list[Any]]

#: `col IN_KEYS` with `keys(...)` as its parameter: a set of any size as one parameter, where
#: `IN (?, ?, ...)` would need batches under SQLite's limit on parameters. The planner still
#: walks the column's index once per key.
IN_KEYS = "IN (SELECT value FROM json_each(?))"


def keys(items: Iterable[str]) -> str:
    """The parameter of an `IN_KEYS` test: these keys as a JSON array, sorted."""
    return json.dumps(sorted(set(items)), ensure_ascii=False)


SCHEMA_VERSION = 11

_UNSPACED_GLOB = "*[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in UNSPACED_RANGES) + "]*"
_FTS_COLUMNS = "title, aliases, section, text"


#: The SQL function the pairs index's triggers call (`cjk_terms`); `register` adds it to a
#: connection, and every connection that writes chunks must have it.
PAIRS_FUNCTION = "vaultd_pairs"
#: Names the terms `cjk_terms` makes. The index is contentless: a row is deleted by giving the
#: terms it was inserted with again, so any change to them (the cut, the scripts it covers)
#: must change this, and the index is then rebuilt from `chunks` at the next open.
PAIRS_VERSION = "pairs-1"
_PAIRS_META = "pairs_version"


def register(db: sqlite3.Connection) -> None:
    """Add the functions the schema's triggers call to a connection."""
    # Functions of the application are called from triggers only in a trusted schema; some
    # builds of SQLite default to untrusted.
    db.execute("PRAGMA trusted_schema=ON")
    db.create_function(PAIRS_FUNCTION, 1, cjk_terms, deterministic=True)


def _fts_triggers(table: str, when_new: str = "", when_old: str = "", function: str = "") -> str:
    """Keep an FTS5 table in step with `chunks` (rows are never updated); `function` is what
    each column's text goes through first (none: as it is)."""
    wrap = f"{function}({{row}}.{{col}})" if function else "{row}.{col}"
    cols = ", ".join(wrap.replace("{col}", c.strip()) for c in _FTS_COLUMNS.split(","))
    return (
        f"CREATE TRIGGER IF NOT EXISTS {table}_ai AFTER INSERT ON chunks {when_new} BEGIN\n"
        f"    INSERT INTO {table}(rowid, {_FTS_COLUMNS})\n"
        f"    VALUES (new.n, {cols.format(row='new')});\n"
        "END;\n"
        f"CREATE TRIGGER IF NOT EXISTS {table}_ad AFTER DELETE ON chunks {when_old} BEGIN\n"
        f"    INSERT INTO {table}({table}, rowid, {_FTS_COLUMNS})\n"
        f"    VALUES ('delete', old.n, {cols.format(row='old')});\n"
        "END;\n"
    )


def _has_unspaced(row: str) -> str:
    fields = " || ' ' || ".join(f"{row}.{c.strip()}" for c in _FTS_COLUMNS.split(","))
    return f"WHEN ({fields}) GLOB '{_UNSPACED_GLOB}'"


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS notes (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    status TEXT NOT NULL,            -- 'ok', 'failed', 'quarantined' or 'left_out'
    error TEXT,
    left_out TEXT,                   -- with 'left_out': too_big, binary, not_utf8, unreadable
    attempts INTEGER NOT NULL DEFAULT 0,
    crashes INTEGER NOT NULL DEFAULT 0,  -- deaths of the process it was in hand for, this content
    title TEXT NOT NULL DEFAULT '',
    aliases TEXT NOT NULL DEFAULT '[]',
    tags TEXT NOT NULL DEFAULT '[]',
    links TEXT NOT NULL DEFAULT '[]',
    frontmatter TEXT NOT NULL DEFAULT '{}',
    indexed_at REAL NOT NULL,
    ctime_ns INTEGER NOT NULL DEFAULT 0,   -- with size, mtime_ns: the stat sha256 was read under
    inode INTEGER NOT NULL DEFAULT 0,
    hashed_ns INTEGER NOT NULL DEFAULT 0,  -- the clock before that read (0: unknown; not trusted)
    -- What kind of file (records.NoteKind). No commas in these last comments: SQLite looks
    -- back for one when a column is dropped (as tests of older schemas do).
    kind TEXT NOT NULL DEFAULT 'note',
    -- A source file's package (pipeline/packages.py): NULL for other kinds or none named.
    package TEXT
);
CREATE TABLE IF NOT EXISTS note_tags (
    tag TEXT NOT NULL,               -- every tag and each of its parents: a/b gives a and a/b
    path TEXT NOT NULL,
    PRIMARY KEY (tag, path)
);
CREATE INDEX IF NOT EXISTS note_tags_path ON note_tags(path);
CREATE TABLE IF NOT EXISTS note_links (
    target TEXT NOT NULL,            -- as written, lower-cased, without ".md"
    source TEXT NOT NULL,
    PRIMARY KEY (target, source)
);
CREATE INDEX IF NOT EXISTS note_links_source ON note_links(source);
CREATE TABLE IF NOT EXISTS chunks (
    n INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    path TEXT NOT NULL,
    idx INTEGER NOT NULL,
    hash TEXT NOT NULL,              -- SHA-256 of the embedded text
    title TEXT NOT NULL,
    section TEXT NOT NULL,
    headings TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    text TEXT NOT NULL,
    aliases TEXT NOT NULL DEFAULT '',  -- the note's aliases, one a line, for the keyword index
    context TEXT NOT NULL DEFAULT '',  -- the `title > section` line the model sees before text
    -- Where besides the lines (records.Location): PDF pages (1-based and inclusive) or a
    -- canvas card's id or a source symbol's path; NULL for a Markdown note's chunks.
    page INTEGER,
    page_end INTEGER,
    node TEXT,
    symbol TEXT
);
CREATE INDEX IF NOT EXISTS chunks_path ON chunks(path, idx);
CREATE INDEX IF NOT EXISTS chunks_hash ON chunks(hash);
-- The words index's terms (stems) and the chunks holding each: a view, it stores nothing.
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vocab USING fts5vocab(chunks_fts, row);
CREATE TABLE IF NOT EXISTS vectors (
    model TEXT NOT NULL,
    hash TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model, hash)
);
CREATE TABLE IF NOT EXISTS in_flight (
    path TEXT PRIMARY KEY,           -- read for the batch being indexed, not yet written
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    since REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS suspects (
    path TEXT PRIMARY KEY,           -- in hand when a process died, not yet tried alone
    sha256 TEXT NOT NULL,
    crashes INTEGER NOT NULL,        -- deaths it was in hand for, with this content
    since REAL NOT NULL
);
"""

#: The keyword indexes: words (stemmed, accents folded) over every chunk, and the pairs of
#: characters of unspaced-script runs (`cjk_terms`) over the chunks that hold such text. The
#: words index reads its text from `chunks`; the pairs index holds only its terms (contentless:
#: its text is made from `chunks` by its triggers). Schema changes to either are migrated by
#: rebuilding from `chunks`, never by embedding again.
_PAIRS_SCHEMA = f"""
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_pairs USING fts5(
    {_FTS_COLUMNS}, content='', tokenize='ascii'
);
""" + _fts_triggers("chunks_pairs", _has_unspaced("new"), _has_unspaced("old"), PAIRS_FUNCTION)
#: How the words index splits and stems text (`keyword.stems` splits words the same way).
WORDS_TOKENIZER = "porter unicode61 remove_diacritics 2"
_FTS_SCHEMA = (
    f"""
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    {_FTS_COLUMNS}, content='chunks', content_rowid='n',
    tokenize='{WORDS_TOKENIZER}'
);
"""
    + _fts_triggers("chunks_fts")
    + _PAIRS_SCHEMA
)
#: Schema 3 to 6 kept trigrams of the same chunks, the pairs index's forerunner.
_TRIGRAMS_DROP = """
DROP TRIGGER IF EXISTS chunks_tri_ai; DROP TRIGGER IF EXISTS chunks_tri_ad;
DROP TABLE IF EXISTS chunks_tri;
"""
_PAIRS_DROP = """
DROP TRIGGER IF EXISTS chunks_pairs_ai; DROP TRIGGER IF EXISTS chunks_pairs_ad;
DROP TABLE IF EXISTS chunks_pairs;
"""
_FTS_DROP = (
    """
DROP TRIGGER IF EXISTS chunks_ai; DROP TRIGGER IF EXISTS chunks_ad;
DROP TRIGGER IF EXISTS chunks_fts_ai; DROP TRIGGER IF EXISTS chunks_fts_ad;
DROP TABLE IF EXISTS chunks_fts;
"""
    + _PAIRS_DROP
    + _TRIGRAMS_DROP
)
_PAIRS_FILL = (
    f"INSERT INTO chunks_pairs(rowid, {_FTS_COLUMNS}) SELECT n, "
    + ", ".join(f"{PAIRS_FUNCTION}({c.strip()})" for c in _FTS_COLUMNS.split(","))
    + f" FROM chunks AS new {_has_unspaced('new').replace('WHEN', 'WHERE', 1)};\n"
)


def create_or_migrate(db: sqlite3.Connection, path: Path) -> None:
    """Create the schema in a new file, or migrate an older one to `SCHEMA_VERSION`.

    Raises StoreError for a file written by a newer vaultd; sqlite3.Error for the caller to
    translate. `path` is only for the message.
    """
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise StoreError(f"{path} was written by a newer vaultd (schema {version}); upgrade vaultd")
    if 0 < version < 3:
        _migrate_keyword_index(db)
    elif 3 <= version < SCHEMA_VERSION:
        # Schema 4 added the in_flight table (and the 'quarantined' status), schema 5
        # the suspects table and the notes' left_out column (and the 'left_out'
        # status), schema 6 the notes' crashes column, schema 7 the pairs index in place of
        # the trigrams, schema 8 the chunks' context column, schema 9 the notes' ctime_ns,
        # inode and hashed_ns, schema 10 the notes' kind and the chunks' page, page_end, node
        # and symbol, schema 11 the notes' package: the migration adds what is missing and
        # touches nothing else.
        _run(
            db,
            f"BEGIN IMMEDIATE;\n{_added_columns(db)}{_SCHEMA}"
            + (_TRIGRAMS_DROP + _PAIRS_DROP + _PAIRS_SCHEMA + _PAIRS_FILL if version < 7 else "")
            + f"PRAGMA user_version={SCHEMA_VERSION};\nCOMMIT;\n",
        )
    else:
        db.executescript(_SCHEMA + _FTS_SCHEMA)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    _keep_pairs_current(db)


def _keep_pairs_current(db: sqlite3.Connection) -> None:
    """Rebuild the pairs index when its terms were made another way (see PAIRS_VERSION)."""
    found = db.execute("SELECT value FROM meta WHERE key = ?", (_PAIRS_META,)).fetchone()
    if found is not None and found[0] == PAIRS_VERSION:
        return
    rebuild = _PAIRS_DROP + _PAIRS_SCHEMA + _PAIRS_FILL if found is not None else ""
    _run(
        db,
        f"BEGIN IMMEDIATE;\n{rebuild}INSERT OR REPLACE INTO meta(key, value) "
        f"VALUES ('{_PAIRS_META}', '{PAIRS_VERSION}');\nCOMMIT;\n",
    )


def _added_columns(db: sqlite3.Connection) -> str:
    """The statements older tables need: schema 5's left_out, schema 6's crashes, schema 8's
    context, schema 9's ctime_ns, inode and hashed_ns, schema 10's kind and locations,
    schema 11's package.

    Source files recorded before schema 11 have no package (NULL) until the first full pass
    after the upgrade names it from their manifests; nothing is read or embedded again.

    Every note recorded before schema 10 was a Markdown note (kind 'note'), and its chunks have
    no location (NULL): nothing is read or embedded again for them.

    Notes recorded before schema 9 have no ctime, inode or time of hash (0): their stat is not
    trusted, so the first pass after the upgrade reads each once (an edit that kept the size
    and mtime before the upgrade is found then) and records them; nothing is embedded again.

    Chunks written before schema 8 get an empty context. Each already has its vector (until
    then a chunk was recorded only with one), so the context is needed only if the vector is
    lost; the embedding phase then finds the text's hash does not match and reads the note
    again (`EmbeddingPhase._batch`).
    """
    columns = {r[1] for r in db.execute("PRAGMA table_info(notes)")}
    script = "" if "left_out" in columns else "ALTER TABLE notes ADD COLUMN left_out TEXT;\n"
    chunk_columns = {r[1] for r in db.execute("PRAGMA table_info(chunks)")}
    if "context" not in chunk_columns:
        script += "ALTER TABLE chunks ADD COLUMN context TEXT NOT NULL DEFAULT '';\n"
    for name, sql_type in (
        ("page", "INTEGER"),
        ("page_end", "INTEGER"),
        ("node", "TEXT"),
        ("symbol", "TEXT"),
    ):
        if name not in chunk_columns:
            script += f"ALTER TABLE chunks ADD COLUMN {name} {sql_type};\n"
    if "kind" not in columns:
        script += "ALTER TABLE notes ADD COLUMN kind TEXT NOT NULL DEFAULT 'note';\n"
    if "package" not in columns:
        script += "ALTER TABLE notes ADD COLUMN package TEXT;\n"
    for name in ("ctime_ns", "inode", "hashed_ns"):
        if name not in columns:
            script += f"ALTER TABLE notes ADD COLUMN {name} INTEGER NOT NULL DEFAULT 0;\n"
    if "crashes" not in columns:
        # Before schema 6 the count lived only in the reason ("crashed the indexer 3 times"):
        # read it out once, here; CAST takes the leading digits.
        script += (
            "ALTER TABLE notes ADD COLUMN crashes INTEGER NOT NULL DEFAULT 0;\n"
            "UPDATE notes SET crashes = CAST(substr(error, 21) AS INTEGER) "
            "WHERE status IN ('failed', 'quarantined') AND error LIKE 'crashed the indexer %';\n"
        )
    return script


def _migrate_keyword_index(db: sqlite3.Connection) -> None:
    """Rebuild the keyword indexes of an older schema from the stored chunks, atomically.

    Schema 1 did not stem; schema 2 had no aliases column and no index of unspaced scripts.
    Nothing is embedded again: the chunks' texts are all the indexes need.
    """
    columns = {r[1] for r in db.execute("PRAGMA table_info(chunks)")}
    add_aliases = (
        "ALTER TABLE chunks ADD COLUMN aliases TEXT NOT NULL DEFAULT '';\n"
        if "aliases" not in columns
        else ""
    )
    script = (
        "BEGIN IMMEDIATE;\n"
        + _FTS_DROP
        + add_aliases
        + _added_columns(db)
        + "UPDATE chunks SET aliases = COALESCE((SELECT group_concat(a.value, char(10)) "
        "FROM notes, json_each(notes.aliases) AS a WHERE notes.path = chunks.path), '');\n"
        + _SCHEMA
        + _FTS_SCHEMA
        + "INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild');\n"
        + _PAIRS_FILL
        + f"PRAGMA user_version={SCHEMA_VERSION};\n"
        + "COMMIT;\n"
    )
    _run(db, script)


def _run(db: sqlite3.Connection, script: str) -> None:
    """A migration script in one transaction: all of it or, on any error, none of it."""
    try:
        db.executescript(script)
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
