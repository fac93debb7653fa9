"""The embedded vector store's upkeep: what grows on disk unless vaultd acts.

chromadb prunes its write-ahead log (`embeddings_queue`) each time it writes the HNSW segment,
but only where the store's `automatically_purge` setting is on: stores created before chromadb
0.5.6 keep it off after migrating, and their log grows without bound. `enable_log_pruning`
turns it on with Chroma's own `chroma vacuum`, before the store is opened. Two more things grow:
- The HNSW segment never reuses the slot of a deleted record: every delete followed by an add
  (a moved note, a note deleted and written again) leaves a dead element behind, and
  `data_level0.bin` and `link_lists.bin` grow with the churn, not with the vault. `compact`
  copies the live records into a new collection, which then takes the old one's name.
- chromadb 1.5.9's `delete_collection` leaves the collection's segment folder on disk, and its
  records' rows in `embedding_metadata_array` (which a later record may even inherit when
  SQLite reuses its rowid). vaultd deletes a collection's records before the collection, and
  removes the folders no segment owns; `drop_retired` does so for the collections vaultd no
  longer uses (another model's, after a switch of model; an interrupted compaction's).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import struct
import subprocess
import sys
import uuid
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import structlog

from vaultd.errors import StoreError
from vaultd.storage.chroma import WRITE_BATCH, Chroma, collection_name, hnsw_configuration

log = structlog.get_logger(__name__)
#: Chroma's own SQLite file inside the store's directory (Chroma names it; vaultd only reads it).
CHROMA_DATABASE = "chroma.sqlite3"
#: Compact the collection once its HNSW segment holds at least this many dead elements, and
#: more dead than live ones: the segment then stays within twice the live records plus the churn
#: between two checks, and a small vault is not rewritten for a handful of moves.
COMPACT_MIN_DEAD = 1000
#: The name a compaction builds its copy under, after the collection's own.
COMPACT_SUFFIX = "-compact"
#: hnswlib's header.bin as chromadb 1.5.9 writes it: format version, offsetLevel0,
#: max_elements, cur_element_count (deleted elements included), size_data_per_element,
#: label_offset, offsetData, maxlevel, enterpoint_node, maxM, maxM0, M, mult, ef_construction.
_HNSW_HEADER = struct.Struct("<IQQQQQQiIQQQdQ")
_HNSW_HEADER_VERSION = 1
#: `chroma vacuum` rewrites the whole SQLite file: allow a large store the time it takes.
VACUUM_TIMEOUT = 1800.0
_VACUUM = (
    "import sys, chromadb_rust_bindings\n"
    "chromadb_rust_bindings.cli(['chroma', 'vacuum', '--path', sys.argv[1], '--force'])\n"
)


def log_pruning(chroma_dir: Path) -> bool | None:
    """Whether Chroma prunes this store's write-ahead log; None when it cannot tell (no store
    yet, or one from before the setting existed: opening it records the setting)."""
    database = chroma_dir / CHROMA_DATABASE
    if not database.exists():
        return None
    try:
        with closing(sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)) as db:
            db.execute("PRAGMA busy_timeout=10000")
            row = db.execute("SELECT config_json_str FROM embeddings_queue_config").fetchone()
        value = json.loads(row[0]).get("automatically_purge") if row else None
    except (sqlite3.Error, ValueError, AttributeError):
        return None
    return value if isinstance(value, bool) else None


def enable_log_pruning(chroma_dir: Path) -> bool:
    """Turn on the pruning of Chroma's write-ahead log where it is off, with Chroma's own
    `chroma vacuum` (which also prunes the log and compacts the file) in a child process.

    Call while holding the data directory's lock and before the store is opened. Returns True
    when it vacuumed; a failure is logged, not raised: the store still works, it only grows.
    """
    if log_pruning(chroma_dir) is not False:
        return False
    before = (chroma_dir / CHROMA_DATABASE).stat().st_size
    log.warning(
        "this store does not prune Chroma's write-ahead log (it was created before chromadb "
        "0.5.6); running chroma vacuum",
        store=str(chroma_dir),
    )
    try:
        result = subprocess.run(
            [sys.executable, "-c", _VACUUM, str(chroma_dir)],
            capture_output=True,
            text=True,
            timeout=VACUUM_TIMEOUT,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.error(
            "chroma vacuum failed; the log keeps growing", store=str(chroma_dir), error=str(exc)
        )
        return False
    if result.returncode != 0 or log_pruning(chroma_dir) is not True:
        lines = (result.stderr or result.stdout).strip().splitlines()
        log.error(
            "chroma vacuum failed; the log keeps growing",
            store=str(chroma_dir),
            exit_code=result.returncode,
            error=lines[-1] if lines else "",
        )
        return False
    after = (chroma_dir / CHROMA_DATABASE).stat().st_size
    log.info(
        "chroma vacuum done: the log is pruned from now on", bytes_before=before, bytes_after=after
    )
    return True


class Upkeep:
    """Compaction and clean-up of one collection's store."""

    def __init__(self, chroma: Chroma) -> None:
        self._chroma = chroma

    def drop_retired(self) -> list[str]:
        """Drop this vault's collections vaultd no longer uses, and the folders chromadb leaves.

        Those are collections vaultd named for this vault and another model (what a switch of
        model leaves once the new collection is complete) and the copy of an interrupted
        compaction. Collections named by the user are never dropped. Call only once the current
        collection is complete: a switch back to the old model is free until then.
        """

        def retire(current: Any) -> list[str]:
            vault = Path(self._chroma.vault_id)
            dropped: list[str] = []
            for item in self._chroma.client.list_collections():
                meta = item.metadata or {}
                model = meta.get("vaultd:model")
                if (
                    item.name == self._chroma.name
                    or meta.get("vaultd:vault") != self._chroma.vault_id
                ):
                    continue
                if item.name == self._chroma.name + COMPACT_SUFFIX or (
                    isinstance(model, str) and item.name == collection_name(vault, model)
                ):
                    _drop_collection(self._chroma.client, item)
                    dropped.append(item.name)
            return dropped

        dropped = self._chroma.call("drop retired collections", retire)
        if dropped:
            log.info("dropped collections no longer used", collections=dropped)
        self._remove_orphan_segments()
        return dropped

    def segment_elements(self) -> int | None:
        """Records in the collection's HNSW segment on disk, deleted ones included.

        None for a server's store, a segment not written yet (Chroma writes it once
        `hnsw:sync_threshold` records have arrived), or a header this code does not know.
        """
        folder = self._segment_dir()
        if folder is None:
            return None
        try:
            header = (folder / "header.bin").read_bytes()
            level0 = (folder / "data_level0.bin").stat().st_size
        except OSError:
            return None
        if len(header) != _HNSW_HEADER.size:
            return None
        fields = _HNSW_HEADER.unpack(header)
        version, elements, per_element = fields[0], fields[3], fields[4]
        # A header that does not describe the data file beside it is not one to act on.
        if version != _HNSW_HEADER_VERSION or per_element <= 0 or level0 < elements * per_element:
            return None
        return int(elements)

    def compact_if_bloated(self) -> bool:
        """Compact when dead elements reach `COMPACT_MIN_DEAD` and outnumber the live ones."""
        elements = self.segment_elements()
        if elements is None:
            return False
        live = self._chroma.call("count the records", lambda c: c.count())
        dead = elements - live
        if dead < max(COMPACT_MIN_DEAD, live):
            return False
        log.info("compacting the vector store", records=live, dead_elements=dead)
        self.compact()
        return True

    def compact(self) -> None:
        """Rewrite the collection without its dead elements.

        The live records are copied (vectors, documents, metadata as stored) into a new
        collection, which takes the old one's name once it holds as many records. Searches
        answer from the old collection until then. Killed half-way, the next start finds either
        the old collection whole, or none under the name: then an empty one is created and the
        indexer refills it from the manifest, and the copy is dropped by `drop_retired`.
        """
        chroma = self._chroma

        def rewrite(old: Any) -> Any:
            client = chroma.client
            temporary = chroma.name + COMPACT_SUFFIX
            for item in client.list_collections():
                if item.name == temporary:
                    _drop_collection(client, item)
            space = ((old.configuration or {}).get("hnsw") or {}).get("space", chroma.space)
            new = client.create_collection(
                temporary,
                metadata=old.metadata,
                configuration=hnsw_configuration(space),
                embedding_function=None,
            )
            offset = 0
            while True:
                got = old.get(
                    include=["embeddings", "documents", "metadatas"],
                    limit=WRITE_BATCH,
                    offset=offset,
                )
                if not got["ids"]:
                    break
                new.upsert(
                    ids=got["ids"],
                    embeddings=got["embeddings"],
                    documents=got["documents"],
                    metadatas=got["metadatas"],
                )
                offset += len(got["ids"])
            if new.count() != old.count():
                _drop_collection(client, new)
                raise StoreError(
                    f"compacting {chroma.name!r} at {chroma.location} copied {new.count()} of "
                    f"{old.count()} records; the collection was left as it was"
                )
            _drop_collection(client, old)
            new.modify(name=chroma.name)
            return new

        chroma.replace("compact the collection", rewrite)
        self._remove_orphan_segments()

    def _segment_dir(self) -> Path | None:
        """The folder of this collection's HNSW segment (embedded store only)."""
        if self._chroma.path is None:
            return None
        collection = self._chroma.call("open the collection", lambda c: c)
        rows = self._chroma_rows(
            "SELECT id FROM segments WHERE collection = ? AND scope = 'VECTOR'",
            (str(collection.id),),
        )
        if not rows:
            return None
        folder = self._chroma.path / str(rows[0][0])
        return folder if folder.is_dir() else None

    def _remove_orphan_segments(self) -> list[str]:
        """Remove segment folders no collection owns any more (chromadb 1.5.9 leaves them)."""
        if self._chroma.path is None:
            return []
        rows = self._chroma_rows("SELECT id FROM segments")
        if rows is None:
            return []  # unknown which folders are in use: remove nothing
        live = {str(r[0]) for r in rows}
        removed: list[str] = []
        for child in sorted(self._chroma.path.iterdir()):
            if child.is_dir() and _is_uuid(child.name) and child.name not in live:
                try:
                    shutil.rmtree(child)
                except OSError as exc:
                    log.warning("cannot remove an unused segment", path=str(child), error=str(exc))
                    continue
                removed.append(child.name)
        if removed:
            log.info(
                "removed unused segment folders", store=self._chroma.location, segments=removed
            )
        return removed

    def _chroma_rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any] | None:
        """Rows from Chroma's own SQLite file, read-only; None when it cannot be read."""
        assert self._chroma.path is not None
        database = self._chroma.path / CHROMA_DATABASE
        try:
            with closing(sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)) as db:
                db.execute("PRAGMA busy_timeout=10000")
                return db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            log.warning("cannot read the store's catalogue", path=str(database), error=str(exc))
            return None


def _drop_collection(client: Any, collection: Any) -> None:
    """Delete a collection's records, then the collection: chromadb 1.5.9's
    `delete_collection` alone leaves the records' array metadata rows behind."""
    while True:
        ids = collection.get(include=[], limit=WRITE_BATCH)["ids"]
        if not ids:
            break
        collection.delete(ids=ids)
    client.delete_collection(collection.name)


def _is_uuid(name: str) -> bool:
    try:
        uuid.UUID(name)
    except ValueError:
        return False
    return True
