"""Percentiles of timed samples, as the benchmarks report them."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def rank(ordered: Sequence[float], share: float) -> float:
    """The sample at `share` of sorted samples, by nearest rank (no interpolation): a p99 of
    few samples is a measured time, never one made up between two."""
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def percentiles(samples: Sequence[float], tail: float = 0.99, digits: int = 2) -> dict[str, float]:
    """The median and the `tail` percentile in milliseconds (`p50_ms`, `p99_ms`), and `n`."""
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, digits),
        f"p{round(tail * 100)}_ms": round(rank(ordered, tail) * 1000, digits),
        "n": len(ordered),
    }
