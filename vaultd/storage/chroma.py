"""One Chroma collection, reached through chromadb: the client opened on first use, every call
on it retried where a retry may help, and chromadb's exceptions translated into `StoreError`
here and nowhere else.

With a server (`[store] url`), transient failures (connection refused or reset, timeouts, 5xx,
429) are retried with exponential backoff, a few attempts within a bounded time, then raised as
`StoreUnavailableError`. Because every write is idempotent, replaying one is safe; and because
the manifest is the truth, whatever a lost server misses is restored from it by the indexer's
`sync_store` once the server answers again. An unreachable server at start-up does not stop
vaultd: the collection is opened on first use.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import random
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

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

#: Upserts are sent in slices of this many records (Chroma caps a request's size).
WRITE_BATCH = 1000
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
#: How many candidates the HNSW search keeps (hnswlib's ef). Chroma's default, 100, is the most
#: passages a search asks for, and there it finds only 0.96 of the true 100 nearest on SciFact's
#: 9,832 passages, so that two builds of the same vectors rank differently (vector nDCG@10 0.661
#: against 0.667). At 400 it finds 0.9987 of them, for about 1 ms more a query
#: (docs/benchmarks.md, "Vector search, exact enough").
SEARCH_EF = 400

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


class Chroma:
    """The client of one collection, embedded under `path` or on the server at `url`."""

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
        on_close: Callable[[], None] = lambda: None,
    ) -> None:
        self.location = url or str(path)
        #: How a new collection compares vectors ("cosine", or "ip" for a pair's, whose two
        #: halves are each of unit length); an existing collection keeps its own.
        self.space = space
        self.remote = bool(url)
        self.name = collection
        self.vault_id = vault_id
        self._model_id = model_id
        #: The embedded store's directory; None for a server's.
        self.path = None if url else path
        self._url = url
        self._token = token
        #: Called under the lock whenever the client is closed: what was derived from the
        #: collection is dropped with it.
        self._on_close = on_close
        self._client: Any = None
        self._collection: Any = None
        #: Opening, closing and counting operations in flight go under this lock: `release`
        #: may close the client only while no other thread is inside an operation.
        self._guard = threading.Lock()
        self._active = 0
        self._last_used = time.monotonic()
        try:
            self.call("open the collection", lambda collection: None)
        except StoreUnavailableError as exc:
            # A server that is down now may be up in a minute: the first use opens it.
            log.warning("the Chroma server is unreachable; will retry", url=url, error=str(exc))

    @property
    def client(self) -> Any:
        """chromadb's client, for an operation in progress (None before the first)."""
        return self._client

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
                assert self.path is not None
                self.path.mkdir(parents=True, exist_ok=True)
                client = chromadb.PersistentClient(path=str(self.path), settings=settings)
            self._client = client
        collection = self._client.get_or_create_collection(
            self.name,
            metadata={
                "hnsw:space": self.space,
                "vaultd:vault": self.vault_id,
                "vaultd:model": self._model_id,
            },
            configuration=hnsw_configuration(self.space),
            embedding_function=None,
        )
        meta = collection.metadata or {}
        for key, expected in (("vaultd:vault", self.vault_id), ("vaultd:model", self._model_id)):
            if meta.get(key) not in (None, expected):
                raise StoreMismatchError(
                    f"collection {self.name!r} at {self.location} belongs to {key.split(':')[1]} "
                    f"{meta.get(key)!r}, not {expected!r}; choose another [store] collection"
                )
        _widen_search(collection)
        self._collection = collection
        return collection

    def call(self, what: str, operation: Callable[[Any], T]) -> T:
        """Run one operation on the collection; retry a server's transient failures."""
        attempts = RETRY_ATTEMPTS if self.remote else 1
        deadline = time.monotonic() + RETRY_BUDGET
        delay = RETRY_FIRST_DELAY
        for attempt in range(1, attempts + 1):
            try:
                with self.in_use() as collection:
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
                        error=brief(exc),
                    )
                    time.sleep(pause)
                    delay *= 2
                    continue
                raise self._translate(what, exc, transient, attempt) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    @contextmanager
    def in_use(self) -> Iterator[Any]:
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
            self._on_close()
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
                f"cannot {what} at {self.location}: the disk is full ({brief(exc)}); nothing "
                "was written, and the write is retried once space is freed"
            )
        if transient:
            tries = f" after {attempts} tries" if attempts > 1 else ""
            return StoreUnavailableError(
                f"cannot {what}: the Chroma server at {self.location} is unavailable{tries} "
                f"({brief(exc)})"
            )
        if _status(exc) in (401, 403):
            return StoreError(
                f"cannot {what}: the Chroma server at {self.location} refused the credentials; "
                "set the token in the variable named by [store] token_env"
            )
        return StoreError(f"cannot {what} at {self.location}: {brief(exc)}")

    def close(self) -> None:
        """Release the client. chromadb shares one system per path within a process; without
        this, a store reopened in the same process would see the old, cached one."""
        with self._guard:
            client, self._client, self._collection = self._client, None, None
            self._on_close()
            _close_client(client, self.location)

    def replace(self, what: str, operation: Callable[[Any], Any]) -> None:
        """Run an operation that puts a new collection in the place of the current one, and
        use the one it returns."""
        try:
            self._collection = self.call(what, operation)
        except BaseException:
            # Whatever state the swap stopped in, the next use reopens the collection by name.
            self._collection = None
            raise


def hnsw_configuration(space: str) -> dict[str, Any]:
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


def brief(exc: BaseException) -> str:
    """One line about an error: chromadb's messages can carry whole response bodies."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:300] + "…"
