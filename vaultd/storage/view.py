"""A read-only view of a manifest, for `vaultd doctor`: what it holds, read without writing a
byte and without the `Manifest` (which creates, migrates and locks).

The file is opened only if it exists and through a query-only connection, so a damaged or
newer file is reported, never repaired or upgraded; the view is a snapshot of one moment.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from vaultd.errors import ManifestDamagedError, StoreError
from vaultd.layout import MANIFEST
from vaultd.storage.connection import is_damage


@dataclass(frozen=True, slots=True)
class ManifestView:
    """What doctor needs from the manifest, read without writing a byte."""

    schema: int
    integrity: str
    vault: str | None
    model: str | None
    notes: int
    chunk_ids: frozenset[str]
    #: (path, status, reason) of every note whose status is not ok (failed, quarantined).
    troubled: tuple[tuple[str, str, str], ...]
    #: Chunks whose text has no stored vector for the model: the next pass embeds them.
    unembedded: int
    #: Each left-out file's kind of reason (`errors.LeftOutKind`), by path.
    left_out: dict[str, str] = field(default_factory=dict)
    #: (path, what of it was not indexed and why) of every file indexed in part.
    in_part: tuple[tuple[str, str], ...] = ()


def read_manifest(data_dir: Path, model_id: str | None) -> ManifestView:
    """Open `vaultd.db` query-only (never created, migrated or written); StoreError if it
    cannot be read, ManifestDamagedError when SQLite finds it damaged.

    `model_id` is the model whose missing vectors `unembedded` counts (the manifest's own when
    None).
    """
    path = data_dir / MANIFEST
    try:
        # mode=rw: an existing file only (a plain connect would create one); query_only
        # refuses every write, as the manifest's own read connections do.
        with closing(sqlite3.connect(f"{path.as_uri()}?mode=rw", uri=True)) as db:
            db.execute("PRAGMA query_only=1")
            db.execute("PRAGMA busy_timeout=10000")
            schema = int(db.execute("PRAGMA user_version").fetchone()[0])
            integrity = str(db.execute("PRAGMA quick_check").fetchone()[0])
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            model = model_id or meta.get("model")
            notes = int(db.execute("SELECT COUNT(*) FROM notes WHERE status = 'ok'").fetchone()[0])
            ids = frozenset(r[0] for r in db.execute("SELECT id FROM chunks"))
            troubled = tuple(
                (str(p), str(s), str(e))
                for p, s, e in db.execute(
                    "SELECT path, status, COALESCE(error, '') FROM notes WHERE status != 'ok' "
                    "ORDER BY path"
                )
            )
            columns = {r[1] for r in db.execute("PRAGMA table_info(notes)")}
            # A manifest older than schema 5 has no reasons' kinds until it is migrated.
            left_out = (
                dict(
                    db.execute(
                        "SELECT path, COALESCE(left_out, '') FROM notes WHERE status = 'left_out'"
                    ).fetchall()
                )
                if "left_out" in columns
                else {}
            )
            in_part = tuple(
                (str(p), str(e))
                for p, e in db.execute(
                    "SELECT path, error FROM notes WHERE status = 'ok' "
                    "AND COALESCE(error, '') != '' ORDER BY path"
                )
            )
            unembedded = int(
                db.execute(
                    "SELECT COUNT(*) FROM chunks WHERE hash NOT IN "
                    "(SELECT hash FROM vectors WHERE model = ?)",
                    (model or "",),
                ).fetchone()[0]
            )
    except sqlite3.Error as exc:
        if is_damage(exc):
            raise ManifestDamagedError(str(path), str(exc)) from exc
        raise StoreError(f"cannot read {path}: {exc}") from exc
    return ManifestView(
        schema=schema,
        integrity=integrity,
        vault=meta.get("vault"),
        model=meta.get("model"),
        notes=notes,
        chunk_ids=ids,
        troubled=troubled,
        unembedded=unembedded,
        left_out=left_out,
        in_part=in_part,
    )
