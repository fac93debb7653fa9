"""Is the embedded Chroma store usable? Asked in a child process, because a damaged HNSW
segment can crash the process that opens it (SIGSEGV) instead of raising.

A marker file says whether the last process to open the store closed it cleanly; only after
an unclean end is the (slow) probe run. A store that fails it is moved aside, and the indexer
rebuilds the collection from the manifest, which holds every chunk and vector.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import structlog

log = structlog.get_logger("vaultd.probe")

DIRTY = "vaultd.dirty"
PROBE_TIMEOUT = 120.0

_PROBE = """
import sys
import chromadb
from chromadb.config import Settings
client = chromadb.PersistentClient(path=sys.argv[1], settings=Settings(anonymized_telemetry=False))
for item in client.list_collections():
    collection = client.get_collection(item.name if hasattr(item, "name") else item)
    count = collection.count()
    if count:
        got = collection.get(limit=1, include=["embeddings"])
        collection.query(query_embeddings=[got["embeddings"][0]], n_results=min(10, count))
        collection.get(include=[], limit=count)
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


def check_store(data_dir: Path, chroma_dir: Path) -> str | None:
    """After an unclean end, probe the store and move it aside if it is damaged.

    Returns the reason it was moved aside, or None.
    """
    if not (data_dir / DIRTY).exists() or not chroma_dir.exists():
        return None
    problem = probe(chroma_dir)
    if problem is None:
        return None
    aside = chroma_dir.with_name(f"{chroma_dir.name}.damaged-{time.strftime('%Y%m%dT%H%M%S')}")
    chroma_dir.rename(aside)
    log.warning(
        "the vector store was damaged; moved aside and rebuilding it from the manifest",
        problem=problem,
        moved_to=str(aside),
    )
    return problem


def mark_open(data_dir: Path) -> None:
    (data_dir / DIRTY).touch()


def mark_closed(data_dir: Path) -> None:
    (data_dir / DIRTY).unlink(missing_ok=True)
