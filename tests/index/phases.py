"""The phases of a pass run one at a time on an indexed small vault, for the phases' tests."""

from __future__ import annotations

from vaultd.index.open import Index
from vaultd.index.outcomes import Summary
from vaultd.index.passes import quiet


def keyword_pass(index: Index) -> Summary:
    """Detection over the whole vault, then the keyword phase alone."""
    indexer, summary = index.indexer, Summary()
    known = index.manifest.known()
    result = indexer.detection.scan(known, indexer.discovery.walk(), summary, full=True, verify=())
    changes, weights, kept = indexer.detection.hash(result, known, summary, quiet)
    indexer.keyword.apply(changes, summary, quiet, weights, read=kept)
    return summary


def paths_in_store(index: Index) -> set[str]:
    records = index.store.get(sorted(index.store.ids()))
    return {r["metadata"]["path"] for r in records.values()}
