"""Where the benchmarks find the checkout and the shared corpora beside it."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The corpora and data sets beside the checkout (../shared); read, never copied into it.
SHARED = REPO.parent / "shared"
CORPORA = SHARED / "corpora"
QUESTIONS = REPO / "bench" / "data" / "questions"
