"""Is the embedded Chroma store usable? Asked in a child process, because a damaged HNSW
segment can crash the process that opens it (SIGSEGV) instead of raising.

A marker file says whether the last process to open the store closed it cleanly, and a clean
close records each store file's size and mtime. The (slow) probe runs only after an unclean end
or when the files changed since that close (damaged, or edited while vaultd was stopped). A
store that fails it is moved aside, a record of why is kept for status, and the indexer rebuilds
the collection from the manifest, which holds every chunk and vector.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import structlog

from vaultd.layout import CHROMA, CLEAN, DAMAGED, DIRTY, MOVED_ASIDE

log = structlog.get_logger(__name__)

PROBE_TIMEOUT = 120.0

_PROBE = """
import sys
import chromadb
from chromadb.config import Settings
client = chromadb.PersistentClient(path=sys.argv[1], settings=Settings(anonymized_telemetry=False))
for item in client.list_collections():
    collection = client.get_collection(item.name if hasattr(item, "name") else item)
    count = collection.count()
    ids = collection.get(include=[], limit=count)["ids"] if count else []
    if len(ids) != count:
        sys.exit(f"{collection.name}: count() says {count} records, {len(ids)} ids listed")
    # A stored vector must find itself (distance ~0): a store that answers without raising
    # can still answer wrongly. Inner-product distance is not 0 for a vector and itself.
    space = (collection.metadata or {}).get("hnsw:space", "l2")
    for offset in sorted({0, count // 2, count - 1} if count and space != "ip" else set()):
        got = collection.get(limit=1, offset=offset, include=["embeddings"])
        found = collection.query(
            query_embeddings=[got["embeddings"][0]], n_results=min(10, count),
            include=["distances"],
        )
        if not found["distances"][0] or min(found["distances"][0]) > 1e-3:
            sys.exit(f"{collection.name}: the record at offset {offset} does not find itself")
"""


def probe(chroma_dir: Path) -> str | None:
    """None when the store opens and answers; else what went wrong."""
    try:
        result = subprocess.run(
            [sys.executable, "-c", _PROBE, str(chroma_dir)],
            capture_output=True,
            timeout=PROBE_TIMEOUT,
            text=True,
        )
    except subprocess.TimeoutExpired:
        return f"opening the store did not finish within {PROBE_TIMEOUT:.0f} s"
    if result.returncode < 0:
        return f"opening the store crashed the process (signal {-result.returncode})"
    if result.returncode != 0:
        lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
        return lines[-1] if lines else f"exit code {result.returncode}"
    return None


def fingerprint(chroma_dir: Path) -> dict[str, list[int]]:
    """Each file under the store: relative path → [size, mtime_ns]."""
    out: dict[str, list[int]] = {}
    for path in sorted(chroma_dir.rglob("*")):
        if path.is_file():
            stat = path.stat()
            out[path.relative_to(chroma_dir).as_posix()] = [stat.st_size, stat.st_mtime_ns]
    return out


def why_probe(data_dir: Path, chroma_dir: Path) -> str | None:
    """Why the store must be probed before it is opened in this process, or None."""
    if not chroma_dir.exists():
        return None
    if (data_dir / DIRTY).exists():
        return "the last process did not close the store"
    try:
        recorded = json.loads((data_dir / CLEAN).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "there is no record of a clean close"
    except (OSError, ValueError) as exc:
        return f"the record of the last clean close is unreadable ({exc})"
    if recorded != fingerprint(chroma_dir):
        return "the store's files changed since vaultd last closed it"
    return None


def check_store(data_dir: Path, chroma_dir: Path) -> str | None:
    """After an unclean end, or when the store's files changed since a clean close, probe the
    store and move it aside if it is damaged.

    Returns the reason it was moved aside, or None.
    """
    reason = why_probe(data_dir, chroma_dir)
    if reason is None:
        return None
    log.info("probing the vector store in a child process", why=reason, store=str(chroma_dir))
    problem = probe(chroma_dir)
    if problem is None:
        return None
    aside = chroma_dir.with_name(f"{chroma_dir.name}{DAMAGED}-{time.strftime('%Y%m%dT%H%M%S')}")
    chroma_dir.rename(aside)
    record = {"problem": problem, "moved_to": str(aside), "at": time.time()}
    try:
        _write_atomically(data_dir / MOVED_ASIDE, json.dumps(record))
    except OSError as exc:
        log.warning("cannot record why the store was moved aside", error=str(exc))
    log.warning(
        "the vector store was damaged; moved aside and rebuilding it from the manifest",
        problem=problem,
        moved_to=str(aside),
    )
    return problem


def last_moved_aside(data_dir: Path) -> dict[str, Any] | None:
    """The last time the store was found damaged: problem, moved_to and at (epoch seconds)."""
    try:
        record = json.loads((data_dir / MOVED_ASIDE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def closed_uncleanly(data_dir: Path) -> bool:
    """Whether the store's last owner died without closing it (or holds it open now)."""
    return (data_dir / DIRTY).exists()


def mark_open(data_dir: Path) -> None:
    # Owner-only from the start, as everything in the data directory (whatever the umask).
    (data_dir / DIRTY).touch(mode=0o600)
    # From now on only the dirty marker speaks for the store's state.
    (data_dir / CLEAN).unlink(missing_ok=True)


def mark_closed(data_dir: Path, chroma_dir: Path | None = None) -> None:
    """Record a clean close; called once every handle on the store is closed."""
    chroma_dir = chroma_dir or data_dir / CHROMA
    try:
        _write_atomically(data_dir / CLEAN, json.dumps(fingerprint(chroma_dir)))
    except OSError as exc:
        # A full disk, say: the dirty marker stays, so the next start probes the store.
        log.warning("cannot record the clean close of the store", error=str(exc))
        return
    (data_dir / DIRTY).unlink(missing_ok=True)


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        temporary.replace(path)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise
