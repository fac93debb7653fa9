"""The phases of a pass run one at a time on an indexed small vault, for the phases' tests."""

from __future__ import annotations

from vaultd.index.detection import Read
from vaultd.index.open import Index
from vaultd.index.outcomes import Summary
from vaultd.index.passes import quiet
from vaultd.records import Change


def detected(
    index: Index, summary: Summary
) -> tuple[list[Change], dict[str, int], dict[str, Read]]:
    """Detection over the whole vault: the changes, their weights and the bytes read."""
    indexer = index.indexer
    known = index.manifest.notes.known()
    result, _ = indexer.detection.scan(
        known, indexer.discovery.walk(), summary, full=True, verify=()
    )
    return indexer.detection.hash(result, known, summary, quiet)


def keyword_pass(index: Index) -> Summary:
    """Detection over the whole vault, then the keyword phase alone."""
    summary = Summary()
    changes, weights, kept = detected(index, summary)
    index.indexer.keyword.apply(changes, summary, quiet, weights, read=kept)
    return summary


def paths_in_store(index: Index) -> set[str]:
    records = index.store.get(sorted(index.store.ids()))
    return {r["metadata"]["path"] for r in records.values()}
