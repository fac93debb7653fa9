"""The vector store: one Chroma collection per vault and model, embedded or on a server.

Chroma is treated as a cache of vaultd's manifest: every write is an idempotent upsert or
delete by deterministic chunk id, so replaying a batch after a crash is harmless. chromadb's
exceptions are translated into `StoreError` here and nowhere else.

With a server (`[store] url`), transient failures (connection refused or reset, timeouts, 5xx,
429) are retried with exponential backoff, a few attempts within a bounded time, then raised as
`StoreUnavailableError`. Because every write is idempotent, replaying one is safe; and because
the manifest is the truth, whatever a lost server misses is restored from it by the indexer's
`sync_store` once the server answers again. An unreachable server at start-up does not stop
vaultd: the collection is opened on first use.

Upkeep (embedded store). chromadb prunes its write-ahead log (`embeddings_queue`) each time it
writes the HNSW segment, but only where the store's `automatically_purge` setting is on: stores
created before chromadb 0.5.6 keep it off after migrating, and their log grows without bound.
`enable_log_pruning` turns it on with Chroma's own `chroma vacuum`, before the store is opened.
Two more things grow unless vaultd acts:
- The HNSW segment never reuses the slot of a deleted record: every delete followed by an add
  (a moved note, a note deleted and written again) leaves a dead element behind, and
  `data_level0.bin` and `link_lists.bin` grow with the churn, not with the vault. `compact`
  copies the live records into a new collection, which then takes the old one's name.
- chromadb 1.5.9's `delete_collection` leaves the collection's segment folder on disk, and its
  records' rows in `embedding_metadata_array` (which a later record may even inherit when
  SQLite reuses its rowid). vaultd deletes a collection's records before the collection, and
  removes the folders no segment owns; `drop_retired` does so for the collections vaultd no
  longer uses (another model's, after a switch of model; an interrupted compaction's).

Exact search. Chroma's HNSW graph (hnswlib, 16 neighbours, `ef_construction` 100) leaves some
vectors with no link to them: its pruning rule drops the links to a vector whose neighbours
are nearer each other than to it (one of many near copies, a note unlike the others), and
later inserts and updates rewire the lists that still held one. No search reaches such a
vector, at any `ef_search`: on obsidian-hub 2.4% of the passages are not returned even by a
search for their own vector (docs/benchmarks.md, "Vectors the graph cannot reach"). So up to
`EXACT_LIMIT` records vaultd searches a copy of the vectors itself, exactly, and Chroma stays
the store; above it, Chroma's graph answers.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import random
import re
import shutil
import sqlite3
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

import numpy as np
import structlog

from vaultd.errors import (
    StoreError,
    StoreFullError,
    StoreMismatchError,
    StoreUnavailableError,
)
from vaultd.logs import ms

#: Chroma's own loggers are chatty at INFO about telemetry and migrations.
logging.getLogger("chromadb").setLevel(logging.WARNING)
log = structlog.get_logger(__name__)

Metadata = Mapping[str, str | int | float | bool | list[str]]
#: Ids read per call when listing a collection: about 8 MB of ids.
IDS_PAGE = 250_000
#: Upserts are sent in slices of this many records (Chroma caps a request's size).
WRITE_BATCH = 1000
#: ... and of about this many bytes of JSON: a Chroma server refuses bigger bodies ("Payload
#: too large"), and a note with hundreds of links repeats them in every chunk's metadata.
WRITE_BYTES = 4 * 1024 * 1024
#: Bytes of JSON per vector component (a float32 written out in decimal, with its comma).
_BYTES_PER_FLOAT = 14
#: Tries of one server operation before it fails: the first plus the retries.
RETRY_ATTEMPTS = 4
#: The first pause between two tries; each later one doubles (0.5, 1, 2 s), with some jitter.
RETRY_FIRST_DELAY = 0.5
#: No retry starts after this many seconds from the first try, so a caller (the daemon's worker,
#: which must stop within 20 s) is never held long by a server that is away.
RETRY_BUDGET = 10.0
#: chromadb's HTTP client waits forever by default; a hung server must fail, and be retried.
CONNECT_TIMEOUT = 5.0
REQUEST_TIMEOUT = 60.0
#: Chroma's own SQLite file inside the store's directory (Chroma names it; vaultd only reads it).
CHROMA_DATABASE = "chroma.sqlite3"
#: Compact the collection once its HNSW segment holds at least this many dead elements, and
#: more dead than live ones: the segment then stays within twice the live records plus the churn
#: between two checks, and a small vault is not rewritten for a handful of moves.
COMPACT_MIN_DEAD = 1000
#: The name a compaction builds its copy under, after the collection's own.
COMPACT_SUFFIX = "-compact"
#: How many candidates the HNSW search keeps (hnswlib's ef). Chroma's default, 100, is the most
#: passages a search asks for, and there it finds only 0.96 of the true 100 nearest on SciFact's
#: 9,832 passages, so that two builds of the same vectors rank differently (vector nDCG@10 0.661
#: against 0.667). At 400 it finds 0.9987 of them, for about 1 ms more a query
#: (docs/benchmarks.md, "Vector search, exact enough").
SEARCH_EF = 400
#: Up to this many records a collection is searched exactly from a copy of its vectors held
#: here; above it, by Chroma's graph (see the module's docstring). A query reads the whole
#: copy, 1.5 KB a record at 384 dimensions: 75 MB and about 8 ms on one core at the limit
#: (docs/benchmarks.md); obsidian-hub's 26,469 passages take 39 MB.
EXACT_LIMIT = 50_000
#: Vectors read per call when the copy is made.
EXACT_PAGE = 5000
#: Filters whose matching rows are kept between two writes.
MASKS_KEPT = 16
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

T = TypeVar("T")


#: What a full disk looks like in errors that lost their errno on the way (chromadb's Rust
#: layer passes SQLite's and the OS's messages on as text).
_FULL_TEXTS = (
    "database or disk is full",
    "no space left on device",
    "disk quota exceeded",
    "file too large",
)


def is_disk_full(exc: BaseException) -> bool:
    """Whether the disk (or a quota, or a file-size limit) refused a write somewhere below."""
    for cause in _causes(exc):
        if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            return True
        if isinstance(cause, sqlite3.Error) and cause.sqlite_errorcode == sqlite3.SQLITE_FULL:
            return True
        if any(text in str(cause).lower() for text in _FULL_TEXTS):
            return True
    return False


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


def collection_name(vault: Path, model_id: str) -> str:
    """A valid, stable Chroma collection name for one vault and model."""
    slug = re.sub(r"[^a-zA-Z0-9._-]+", "-", vault.name).strip("-._")[:40] or "vault"
    digest = hashlib.sha256(f"{vault}\x00{model_id}".encode()).hexdigest()[:10]
    return f"vaultd-{slug}-{digest}"


def auth_headers(token: str) -> dict[str, str] | None:
    """The headers sent to a Chroma server: a bearer token when one is configured."""
    return {"Authorization": f"Bearer {token}"} if token else None


def _causes(exc: BaseException) -> list[BaseException]:
    """The exception and everything it was raised from or during, innermost last."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _close_client(client: Any, location: str) -> None:
    close = getattr(client, "close", None)
    # chromadb's HTTP clients (its own and its internal admin client's) keep httpx sessions
    # that its close() leaves open: close them too, or their sockets linger until garbage
    # collection.
    sessions = [
        getattr(getattr(owner, "_server", None), "_session", None)
        for owner in (client, getattr(client, "_admin_client", None))
    ]
    if close is None:
        return
    try:
        close()
        for session in sessions:
            if session is not None:
                session.close()
    except Exception as exc:
        raise StoreError(f"cannot close the Chroma client at {location}: {exc}") from exc


def _status(exc: BaseException) -> int | None:
    """The HTTP status behind a chromadb error, when there is one."""
    import httpx
    from chromadb.errors import ChromaError

    for cause in _causes(exc):
        if isinstance(cause, httpx.HTTPStatusError):
            return cause.response.status_code
        if isinstance(cause, ChromaError):
            return cause.code()
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether trying again may help: the network, a timeout, an overloaded or failing server."""
    import httpx

    if any(
        isinstance(c, httpx.TransportError | ConnectionError | TimeoutError) for c in _causes(exc)
    ):
        return True
    status = _status(exc)
    return status is not None and (status >= 500 or status == 429)


class VectorStore:
    """One Chroma collection, embedded under `path` or on the server at `url`."""

    def __init__(
        self,
        *,
        collection: str,
        vault_id: str,
        model_id: str,
        path: Path | None = None,
        url: str = "",
        token: str = "",
        space: str = "cosine",
    ) -> None:
        self.location = url or str(path)
        #: How a new collection compares vectors ("cosine", or "ip" for a pair's, whose two
        #: halves are each of unit length); an existing collection keeps its own.
        self.space = space
        self.remote = bool(url)
        self.name = collection
        self._vault_id = vault_id
        self._model_id = model_id
        self._path = path
        self._url = url
        self._token = token
        self._client: Any = None
        self._collection: Any = None
        #: Opening, closing and counting operations in flight go under this lock: `release`
        #: may close the client only while no other thread is inside an operation.
        self._guard = threading.Lock()
        self._active = 0
        self._last_used = time.monotonic()
        #: The exact copy of the vectors: made on the first search, kept in step by every
        #: write through this object, dropped with the client (`release`, `close`). None when
        #: not made yet, or the collection is larger than EXACT_LIMIT.
        self._exact: ExactIndex | None = None
        self._exact_tried = False
        #: The writes made while the copy is being read, replayed on it once it is read
        #: (whether the read saw them or not, the replay leaves what Chroma holds).
        self._pending: list[tuple[list[str], np.ndarray | None]] | None = None
        #: The copy's rows matching a filter, by the filter, with the copy's version then.
        self._masks: dict[str, tuple[ExactIndex, int, np.ndarray]] = {}
        try:
            self._call("open the collection", lambda collection: None)
        except StoreUnavailableError as exc:
            # A server that is down now may be up in a minute: the first use opens it.
            log.warning("the Chroma server is unreachable; will retry", url=url, error=str(exc))

    # -- connecting ----------------------------------------------------------------------------

    def _connect(self) -> Any:
        """The collection, opened (and checked) on first use; raises chromadb's errors as is."""
        if self._collection is not None:
            return self._collection
        import chromadb
        from chromadb.config import Settings

        if self._client is None:
            settings = Settings(anonymized_telemetry=False, allow_reset=False)
            if self.remote:
                parsed = urlparse(self._url)
                client = chromadb.HttpClient(
                    host=parsed.hostname or "localhost",
                    port=parsed.port or (443 if parsed.scheme == "https" else 8000),
                    ssl=parsed.scheme == "https",
                    headers=auth_headers(self._token),
                    settings=settings,
                )
                _set_timeout(client)
            else:
                assert self._path is not None
                self._path.mkdir(parents=True, exist_ok=True)
                client = chromadb.PersistentClient(path=str(self._path), settings=settings)
            self._client = client
        collection = self._client.get_or_create_collection(
            self.name,
            metadata={
                "hnsw:space": self.space,
                "vaultd:vault": self._vault_id,
                "vaultd:model": self._model_id,
            },
            configuration=_hnsw_configuration(self.space),
            embedding_function=None,
        )
        meta = collection.metadata or {}
        for key, expected in (("vaultd:vault", self._vault_id), ("vaultd:model", self._model_id)):
            if meta.get(key) not in (None, expected):
                raise StoreMismatchError(
                    f"collection {self.name!r} at {self.location} belongs to {key.split(':')[1]} "
                    f"{meta.get(key)!r}, not {expected!r}; choose another [store] collection"
                )
        _widen_search(collection)
        self._collection = collection
        return collection

    def _call(self, what: str, operation: Callable[[Any], T]) -> T:
        """Run one operation on the collection; retry a server's transient failures."""
        attempts = RETRY_ATTEMPTS if self.remote else 1
        deadline = time.monotonic() + RETRY_BUDGET
        delay = RETRY_FIRST_DELAY
        for attempt in range(1, attempts + 1):
            try:
                with self._in_use() as collection:
                    return operation(collection)
            except StoreError:
                raise
            except Exception as exc:
                transient = self.remote and is_transient(exc)
                if self.remote and _status(exc) == 404 and self._collection is not None:
                    # The collection vanished (a server that lost its data): reopen it on the
                    # next call. Fail this one, so the caller's next full pass refills it.
                    self._collection = None
                    raise StoreUnavailableError(
                        f"the collection {self.name!r} vanished from {self.location}; it is "
                        "recreated and refilled from vaultd's manifest on the next pass"
                    ) from exc
                pause = delay * random.uniform(1.0, 1.25)
                if transient and attempt < attempts and time.monotonic() + pause < deadline:
                    log.warning(
                        "Chroma server failed; retrying",
                        operation=what,
                        attempt=attempt,
                        pause_ms=ms(pause),
                        error=_brief(exc),
                    )
                    time.sleep(pause)
                    delay *= 2
                    continue
                raise self._translate(what, exc, transient, attempt) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    @contextmanager
    def _in_use(self) -> Iterator[Any]:
        with self._guard:
            collection = self._connect()
            self._active += 1
        try:
            yield collection
        finally:
            with self._guard:
                self._active -= 1
                self._last_used = time.monotonic()

    def release(self, unused_for: float) -> bool:
        """Close an embedded store's client once no operation has run for `unused_for` seconds,
        giving back the memory Chroma holds for the collection: its whole HNSW index (447 MB
        for 221,814 vectors), which it loads on first use and keeps for the life of the client.
        The next operation reopens it (0.85 s for that index, 0.1 s for a small vault).
        True when it closed the client. A server's store holds nothing worth releasing here.
        """
        if self.remote:
            return False
        with self._guard:
            if self._client is None or self._active:
                return False
            if time.monotonic() - self._last_used < unused_for:
                return False
            client, self._client, self._collection = self._client, None, None
            self._exact, self._exact_tried, self._pending = None, False, None
            # Under the lock: a reopening in between would share the system being stopped
            # (chromadb keeps one per path and process).
            _close_client(client, self.location)
        return True

    @property
    def loaded(self) -> bool:
        """Whether the client is open (an embedded store then holds its index in memory)."""
        return self._client is not None

    def _translate(self, what: str, exc: Exception, transient: bool, attempts: int) -> StoreError:
        if not self.remote and is_disk_full(exc):
            return StoreFullError(
                f"cannot {what} at {self.location}: the disk is full ({_brief(exc)}); nothing "
                "was written, and the write is retried once space is freed"
            )
        if transient:
            tries = f" after {attempts} tries" if attempts > 1 else ""
            return StoreUnavailableError(
                f"cannot {what}: the Chroma server at {self.location} is unavailable{tries} "
                f"({_brief(exc)})"
            )
        if _status(exc) in (401, 403):
            return StoreError(
                f"cannot {what}: the Chroma server at {self.location} refused the credentials; "
                "set the token in the variable named by [store] token_env"
            )
        return StoreError(f"cannot {what} at {self.location}: {_brief(exc)}")

    # -- operations ----------------------------------------------------------------------------

    def upsert(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        documents: Sequence[str],
        metadatas: Sequence[Metadata],
    ) -> None:
        dimensions = vectors.shape[1] if vectors.ndim > 1 else 0
        for batch in _write_slices(documents, metadatas, dimensions):

            def write(collection: Any, batch: slice = batch) -> None:
                rows = np.asarray(vectors[batch], dtype=np.float32)
                collection.upsert(
                    ids=list(ids[batch]),
                    embeddings=rows,
                    documents=list(documents[batch]),
                    metadatas=[dict(m) for m in metadatas[batch]],
                )
                self._copy_written(list(ids[batch]), rows)

            self._call("upsert into the collection", write)

    def delete(self, ids: Sequence[str]) -> None:
        for start in range(0, len(ids), WRITE_BATCH):
            batch = list(ids[start : start + WRITE_BATCH])

            def remove(collection: Any, batch: list[str] = batch) -> None:
                collection.delete(ids=batch)
                self._copy_written(batch, None)

            self._call("delete from the collection", remove)

    def ids(self) -> set[str]:
        """Every id in the collection, read in pages.

        Pages are large because each one costs a scan up to its offset: 222,000 ids took 9 s
        in pages of 5,000 and 1 s in one (a restart of a 50,000-note vault waits for this).
        """
        out: set[str] = set()
        offset = 0
        page = IDS_PAGE
        while True:

            def page_of(collection: Any, offset: int = offset) -> list[str]:
                return list(collection.get(include=[], limit=page, offset=offset)["ids"])

            got = self._call("list the ids in the collection", page_of)
            out.update(got)
            if len(got) < page:
                return out
            offset += page

    def get(self, ids: Sequence[str], *, with_vectors: bool = False) -> dict[str, dict[str, Any]]:
        include = ["documents", "metadatas"] + (["embeddings"] if with_vectors else [])
        out: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), WRITE_BATCH):
            batch = list(ids[start : start + WRITE_BATCH])

            def read(collection: Any, batch: list[str] = batch) -> Any:
                return collection.get(ids=batch, include=include)

            got = self._call("read from the collection", read)
            embeddings = got.get("embeddings")
            for i, chunk_id in enumerate(got["ids"]):
                record: dict[str, Any] = {
                    "document": got["documents"][i],
                    "metadata": got["metadatas"][i],
                }
                if with_vectors and embeddings is not None:
                    record["vector"] = np.asarray(embeddings[i], dtype=np.float32)
                out[chunk_id] = record
        return out

    def close(self) -> None:
        """Release the client. chromadb shares one system per path within a process; without
        this, a store reopened in the same process would see the old, cached one."""
        with self._guard:
            client, self._client, self._collection = self._client, None, None
            self._exact, self._exact_tried, self._pending = None, False, None
            _close_client(client, self.location)

    def count(self) -> int:
        return int(self._call("count the records", lambda c: c.count()))

    def count_where(self, where: Mapping[str, Any]) -> int:
        """The records whose metadata matches `where` (Chroma counts only all of them: this
        lists the matching ids)."""

        def matching(collection: Any) -> int:
            return len(collection.get(where=dict(where), include=[])["ids"])

        return int(self._call("count the records", matching))

    def query(
        self, vector: np.ndarray, k: int, where: Mapping[str, Any] | None = None
    ) -> list[tuple[str, float]]:
        """(chunk id, similarity) of the `k` nearest chunks: cosine, or a pair's dot product."""
        if k <= 0:
            return []
        rows = np.asarray(vector, dtype=np.float32).reshape(1, -1)
        return self._call("query the collection", lambda c: self._search(c, rows, k, where))[0]

    def query_many(
        self, vectors: np.ndarray, k: int, where: Mapping[str, Any] | None = None
    ) -> list[list[tuple[str, float]]]:
        """`query` for each row of `vectors`, in one call."""
        if k <= 0 or not len(vectors):
            return [[] for _ in range(len(vectors))]
        rows = np.asarray(vectors, dtype=np.float32)
        return self._call("query the collection", lambda c: self._search(c, rows, k, where))

    @property
    def exact(self) -> bool:
        """Whether searches are answered exactly (once the first has made the copy)."""
        return self._exact is not None

    def _search(
        self, collection: Any, rows: np.ndarray, k: int, where: Mapping[str, Any] | None
    ) -> list[list[tuple[str, float]]]:
        exact = self._exact_copy(collection)
        if exact is not None:
            allowed = self._matching(collection, exact, where) if where else None
            return [exact.nearest(row, k, allowed) for row in rows]
        got = collection.query(
            query_embeddings=list(rows),
            n_results=k,
            where=dict(where) if where else None,
            include=["distances"],
        )
        return [
            [(i, 1.0 - float(d)) for i, d in zip(row_ids, row_d, strict=False)]
            for row_ids, row_d in zip(got["ids"] or [], got.get("distances") or [], strict=False)
        ]

    def _matching(self, collection: Any, exact: ExactIndex, where: Mapping[str, Any]) -> np.ndarray:
        """The copy's rows that match `where`. Chroma decides what matches its own filter
        language (vaultd does not mirror it); the answer serves until the next write, since a
        pair's route filter lists nearly every id of the vault on every search."""
        key = json.dumps(where, sort_keys=True, default=str)
        version = exact.version
        cached = self._masks.get(key)
        if cached is not None and cached[0] is exact and cached[1] == version:
            return cached[2]
        mask = exact.rows_of(collection.get(where=dict(where), include=[])["ids"])
        if len(self._masks) >= MASKS_KEPT:
            self._masks.clear()
        self._masks[key] = (exact, version, mask)
        return mask

    def _exact_copy(self, collection: Any) -> ExactIndex | None:
        """The exact copy, made on first use when the collection is small enough."""
        with self._guard:
            if self._exact is not None or self._exact_tried:
                return self._exact
            self._exact_tried = True
            if collection.count() > EXACT_LIMIT:
                return None
            self._pending = []
        # Read outside the lock: searches meanwhile are Chroma's, writes are kept for replay.
        hnsw = (collection.configuration or {}).get("hnsw") or {}
        exact = ExactIndex(unit=hnsw.get("space", self.space) != "ip")
        offset = 0
        while True:
            got = collection.get(include=["embeddings"], limit=EXACT_PAGE, offset=offset)
            if not got["ids"]:
                break
            exact.put(list(got["ids"]), np.asarray(got["embeddings"], dtype=np.float32))
            offset += len(got["ids"])
        with self._guard:
            pending, self._pending = self._pending, None
            if pending is None or self._collection is not collection:
                return None  # released or closed meanwhile: the next client reads afresh
            for ids, rows in pending:
                if rows is None:
                    exact.drop(ids)
                else:
                    exact.put(ids, rows)
            self._exact = exact
        return exact

    def _copy_written(self, ids: list[str], rows: np.ndarray | None) -> None:
        """Keep the exact copy in step with a write (`rows` None: a delete)."""
        with self._guard:
            exact = self._exact
            if exact is None:
                if self._pending is not None:
                    self._pending.append((list(ids), rows))
                return
            if rows is None:
                exact.drop(ids)
                return
            exact.put(ids, rows)
            if len(exact) > EXACT_LIMIT:
                log.info("the vector store outgrew exact search", records=len(exact))
                self._exact = None

    # -- upkeep --------------------------------------------------------------------------------

    def drop_retired(self) -> list[str]:
        """Drop this vault's collections vaultd no longer uses, and the folders chromadb leaves.

        Those are collections vaultd named for this vault and another model (what a switch of
        model leaves once the new collection is complete) and the copy of an interrupted
        compaction. Collections named by the user are never dropped. Call only once the current
        collection is complete: a switch back to the old model is free until then.
        """

        def retire(current: Any) -> list[str]:
            vault = Path(self._vault_id)
            dropped: list[str] = []
            for item in self._client.list_collections():
                meta = item.metadata or {}
                model = meta.get("vaultd:model")
                if item.name == self.name or meta.get("vaultd:vault") != self._vault_id:
                    continue
                if item.name == self.name + COMPACT_SUFFIX or (
                    isinstance(model, str) and item.name == collection_name(vault, model)
                ):
                    _drop_collection(self._client, item)
                    dropped.append(item.name)
            return dropped

        dropped = self._call("drop retired collections", retire)
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
        live = self.count()
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

        def rewrite(old: Any) -> Any:
            client = self._client
            temporary = self.name + COMPACT_SUFFIX
            for item in client.list_collections():
                if item.name == temporary:
                    _drop_collection(client, item)
            space = ((old.configuration or {}).get("hnsw") or {}).get("space", self.space)
            new = client.create_collection(
                temporary,
                metadata=old.metadata,
                configuration=_hnsw_configuration(space),
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
                    f"compacting {self.name!r} at {self.location} copied {new.count()} of "
                    f"{old.count()} records; the collection was left as it was"
                )
            _drop_collection(client, old)
            new.modify(name=self.name)
            return new

        try:
            self._collection = self._call("compact the collection", rewrite)
        except BaseException:
            # Whatever state the swap stopped in, the next use reopens the collection by name.
            self._collection = None
            raise
        self._remove_orphan_segments()

    def _segment_dir(self) -> Path | None:
        """The folder of this collection's HNSW segment (embedded store only)."""
        if self.remote or self._path is None:
            return None
        collection = self._call("open the collection", lambda c: c)
        rows = self._chroma_rows(
            "SELECT id FROM segments WHERE collection = ? AND scope = 'VECTOR'",
            (str(collection.id),),
        )
        if not rows:
            return None
        folder = self._path / str(rows[0][0])
        return folder if folder.is_dir() else None

    def _remove_orphan_segments(self) -> list[str]:
        """Remove segment folders no collection owns any more (chromadb 1.5.9 leaves them)."""
        if self.remote or self._path is None:
            return []
        rows = self._chroma_rows("SELECT id FROM segments")
        if rows is None:
            return []  # unknown which folders are in use: remove nothing
        live = {str(r[0]) for r in rows}
        removed: list[str] = []
        for child in sorted(self._path.iterdir()):
            if child.is_dir() and _is_uuid(child.name) and child.name not in live:
                try:
                    shutil.rmtree(child)
                except OSError as exc:
                    log.warning("cannot remove an unused segment", path=str(child), error=str(exc))
                    continue
                removed.append(child.name)
        if removed:
            log.info("removed unused segment folders", store=self.location, segments=removed)
        return removed

    def _chroma_rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any] | None:
        """Rows from Chroma's own SQLite file, read-only; None when it cannot be read."""
        assert self._path is not None
        database = self._path / CHROMA_DATABASE
        try:
            with closing(sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)) as db:
                db.execute("PRAGMA busy_timeout=10000")
                return db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            log.warning("cannot read the store's catalogue", path=str(database), error=str(exc))
            return None


class ExactIndex:
    """Vectors by id, searched by scoring every one (see the module's docstring)."""

    def __init__(self, *, unit: bool) -> None:
        #: Cosine compares directions: the rows and queries are scaled to unit length; a
        #: pair's dot product takes them as they are.
        self.unit = unit
        self._lock = threading.Lock()
        self._rows: dict[str, int] = {}
        self._ids: list[str] = []
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._live = np.zeros(0, dtype=bool)
        self._free: list[int] = []
        #: Counts the writes, so that what was derived from the rows knows when it is stale.
        self.version = 0

    def __len__(self) -> int:
        return len(self._rows)

    def _scaled(self, vectors: np.ndarray) -> np.ndarray:
        vectors = np.asarray(vectors, dtype=np.float32)
        if not self.unit:
            return vectors
        norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
        return vectors / np.where(norms > 0, norms, 1.0)

    def put(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        rows = self._scaled(np.atleast_2d(vectors))
        with self._lock:
            self.version += 1
            if self._matrix.shape[1] != rows.shape[1]:
                if self._rows:
                    raise StoreError(
                        f"vectors of {rows.shape[1]} dimensions among {self._matrix.shape[1]}"
                    )
                self._matrix = np.zeros((0, rows.shape[1]), dtype=np.float32)
            for chunk_id, row in zip(ids, rows, strict=True):
                at = self._rows.get(chunk_id)
                if at is None:
                    at = self._free.pop() if self._free else self._grow()
                    self._rows[chunk_id] = at
                    self._ids[at] = chunk_id
                self._matrix[at] = row
                self._live[at] = True

    def _grow(self) -> int:
        at = len(self._ids)
        if at == len(self._matrix):
            size = max(1024, 2 * at)
            matrix = np.zeros((size, self._matrix.shape[1]), dtype=np.float32)
            matrix[:at] = self._matrix[:at]
            live = np.zeros(size, dtype=bool)
            live[:at] = self._live[:at]
            self._matrix, self._live = matrix, live
        self._ids.append("")
        return at

    def drop(self, ids: Sequence[str]) -> None:
        with self._lock:
            self.version += 1
            for chunk_id in ids:
                at = self._rows.pop(chunk_id, None)
                if at is not None:
                    self._live[at] = False
                    self._free.append(at)

    def rows_of(self, ids: Sequence[str]) -> np.ndarray:
        """A mask of the rows holding `ids` (for `nearest`'s `allowed`)."""
        with self._lock:
            mask = np.zeros(len(self._ids), dtype=bool)
            mask[[self._rows[i] for i in ids if i in self._rows]] = True
            return mask

    def nearest(
        self, vector: np.ndarray, k: int, allowed: np.ndarray | None = None
    ) -> list[tuple[str, float]]:
        """(id, similarity) of the `k` nearest, best first; with `allowed` (from `rows_of`,
        since when no row was written), among those rows only."""
        query = self._scaled(vector.reshape(-1))
        with self._lock:
            used = len(self._ids)
            if not self._rows or query.shape[0] != self._matrix.shape[1]:
                return []
            scores = self._matrix[:used] @ query
            keep = self._live[:used]
            if allowed is not None:
                # Rows added since the mask was made are not in it, nor allowed.
                within = np.zeros(used, dtype=bool)
                within[: min(used, len(allowed))] = allowed[:used]
                keep = keep & within
            candidates = np.flatnonzero(keep)
            ids = self._ids
            if len(candidates) > k:
                part = np.argpartition(-scores[candidates], k - 1)[:k]
                candidates = candidates[part]
            best = candidates[np.argsort(-scores[candidates], kind="stable")]
            return [(ids[int(i)], float(scores[i])) for i in best]


def _hnsw_configuration(space: str) -> dict[str, Any]:
    """A new collection's HNSW settings (given a configuration, Chroma ignores the
    `hnsw:space` metadata, which is kept for readers of older stores)."""
    return {"hnsw": {"space": space, "ef_search": SEARCH_EF}}


def _widen_search(collection: Any) -> None:
    """Raise an older collection's HNSW search breadth to SEARCH_EF. It must run before the
    collection's first query: a segment already loaded keeps the breadth it was loaded with."""
    try:
        hnsw = (collection.configuration or {}).get("hnsw") or {}
        if hnsw.get("ef_search", SEARCH_EF) >= SEARCH_EF:
            return
        collection.modify(configuration={"hnsw": {"ef_search": SEARCH_EF}})
    except Exception as exc:  # search still works, at the breadth the collection has
        log.warning("could not widen the vector search", collection=collection.name, error=str(exc))
    else:
        log.info("widened the vector search", collection=collection.name, ef_search=SEARCH_EF)


def _set_timeout(client: Any) -> None:
    """Bound every later request of a chromadb HTTP client (it has no setting for this)."""
    import httpx

    session = getattr(getattr(client, "_server", None), "_session", None)
    if isinstance(session, httpx.Client):
        session.timeout = httpx.Timeout(REQUEST_TIMEOUT, connect=CONNECT_TIMEOUT)


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


def _brief(exc: BaseException) -> str:
    """One line about an error: chromadb's messages can carry whole response bodies."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:300] + "…"


def _write_slices(
    documents: Sequence[str], metadatas: Sequence[Metadata], dimensions: int
) -> Iterator[slice]:
    """Consecutive slices of at most WRITE_BATCH records and about WRITE_BYTES of JSON (a
    single bigger record goes alone)."""
    start, size = 0, 0
    for i, (document, metadata) in enumerate(zip(documents, metadatas, strict=True)):
        record = (
            len(document.encode("utf-8"))
            + len(json.dumps(metadata, ensure_ascii=False, default=str).encode("utf-8"))
            + dimensions * _BYTES_PER_FLOAT
            + 64
        )
        if i > start and (i - start >= WRITE_BATCH or size + record > WRITE_BYTES):
            yield slice(start, i)
            start, size = i, 0
        size += record
    if start < len(documents):
        yield slice(start, len(documents))
