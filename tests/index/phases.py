"""The phases of a pass run one at a time on an indexed small vault, for the phases' tests."""

from __future__ import annotations

from vaultd.index.open import Index
from vaultd.index.outcomes import Summary
from vaultd.index.passes import Hashed, quiet


def detected(index: Index) -> Hashed:
    """Detection over the whole vault: the changes, their weights, the bytes read and the
    counts (the scan's and the hashing's)."""
    indexer = index.indexer
    known = index.manifest.notes.known()
    scanned = indexer.detection.scan(known, indexer.discovery.walk(), full=True, verify=())
    hashed = indexer.detection.hash(scanned.scan, known, quiet)
    return Hashed(hashed.changes, hashed.weights, hashed.kept, scanned.summary + hashed.summary)


def keyword_pass(index: Index) -> Summary:
    """Detection over the whole vault, then the keyword phase alone."""
    hashed = detected(index)
    written = index.indexer.keyword.apply(hashed.changes, quiet, hashed.weights, read=hashed.kept)
    return hashed.summary + written.summary


def paths_in_store(index: Index) -> set[str]:
    records = index.store.get(sorted(index.store.ids()))
    return {r["metadata"]["path"] for r in records.values()}
