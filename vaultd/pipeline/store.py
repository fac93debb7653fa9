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
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

import numpy as np
import structlog

from vaultd.errors import StoreError, StoreMismatchError

#: Chroma's own loggers are chatty at INFO about telemetry and migrations.
logging.getLogger("chromadb").setLevel(logging.WARNING)
log = structlog.get_logger("vaultd.store")

Metadata = Mapping[str, str | int | float | bool | list[str]]
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

T = TypeVar("T")


class StoreUnavailableError(StoreError):
    """Raised when a Chroma server did not answer (or answered 5xx) on every try."""


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
    ) -> None:
        self.location = url or str(path)
        self.remote = bool(url)
        self.name = collection
        self._vault_id = vault_id
        self._model_id = model_id
        self._path = path
        self._url = url
        self._token = token
        self._client: Any = None
        self._collection: Any = None
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
                "hnsw:space": "cosine",
                "vaultd:vault": self._vault_id,
                "vaultd:model": self._model_id,
            },
            embedding_function=None,
        )
        meta = collection.metadata or {}
        for key, expected in (("vaultd:vault", self._vault_id), ("vaultd:model", self._model_id)):
            if meta.get(key) not in (None, expected):
                raise StoreMismatchError(
                    f"collection {self.name!r} at {self.location} belongs to {key.split(':')[1]} "
                    f"{meta.get(key)!r}, not {expected!r}; choose another [store] collection"
                )
        self._collection = collection
        return collection

    def _call(self, what: str, operation: Callable[[Any], T]) -> T:
        """Run one operation on the collection; retry a server's transient failures."""
        attempts = RETRY_ATTEMPTS if self.remote else 1
        deadline = time.monotonic() + RETRY_BUDGET
        delay = RETRY_FIRST_DELAY
        for attempt in range(1, attempts + 1):
            try:
                return operation(self._connect())
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
                        pause=round(pause, 2),
                        error=_brief(exc),
                    )
                    time.sleep(pause)
                    delay *= 2
                    continue
                raise self._translate(what, exc, transient, attempt) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _translate(self, what: str, exc: Exception, transient: bool, attempts: int) -> StoreError:
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
        for start in range(0, len(ids), WRITE_BATCH):
            batch = slice(start, start + WRITE_BATCH)

            def write(collection: Any, batch: slice = batch) -> None:
                collection.upsert(
                    ids=list(ids[batch]),
                    embeddings=np.asarray(vectors[batch], dtype=np.float32),
                    documents=list(documents[batch]),
                    metadatas=[dict(m) for m in metadatas[batch]],
                )

            self._call("upsert into the collection", write)

    def delete(self, ids: Sequence[str]) -> None:
        for start in range(0, len(ids), WRITE_BATCH):
            batch = list(ids[start : start + WRITE_BATCH])

            def remove(collection: Any, batch: list[str] = batch) -> None:
                collection.delete(ids=batch)

            self._call("delete from the collection", remove)

    def ids(self) -> set[str]:
        """Every id in the collection, read in pages."""
        out: set[str] = set()
        offset = 0
        page = 5000
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
        close = getattr(self._client, "close", None)
        if close is not None:
            try:
                close()
            except Exception as exc:
                raise StoreError(
                    f"cannot close the Chroma client at {self.location}: {exc}"
                ) from exc

    def count(self) -> int:
        return int(self._call("count the records", lambda c: c.count()))

    def query(
        self, vector: np.ndarray, k: int, where: Mapping[str, Any] | None = None
    ) -> list[tuple[str, float]]:
        """(chunk id, cosine similarity) of the `k` nearest chunks."""
        if k <= 0:
            return []
        got = self._call(
            "query the collection",
            lambda c: c.query(
                query_embeddings=[np.asarray(vector, dtype=np.float32)],
                n_results=k,
                where=dict(where) if where else None,
                include=["distances"],
            ),
        )
        ids = got["ids"][0] if got["ids"] else []
        distances = got["distances"][0] if got.get("distances") else []
        return [(i, 1.0 - float(d)) for i, d in zip(ids, distances, strict=False)]


def _set_timeout(client: Any) -> None:
    """Bound every later request of a chromadb HTTP client (it has no setting for this)."""
    import httpx

    session = getattr(getattr(client, "_server", None), "_session", None)
    if isinstance(session, httpx.Client):
        session.timeout = httpx.Timeout(REQUEST_TIMEOUT, connect=CONNECT_TIMEOUT)


def _brief(exc: BaseException) -> str:
    """One line about an error: chromadb's messages can carry whole response bodies."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:300] + "…"
