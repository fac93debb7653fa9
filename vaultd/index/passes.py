"""What the phases of a pass share: the settings they are made with, what each hands back to
the indexer, the pause points and the progress callback."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from vaultd.index.extract import Extraction
from vaultd.index.outcomes import Summary
from vaultd.index.parsers import POOL_ABOVE
from vaultd.records import Change, FileState, Scan

#: A batch is embedded (sorted by length, so padding stays small) and flushed to the store once
#: it holds this many chunks. Big batches pad least: on obsidian-hub, 4,096 chunks pad 0.7%
#: over the texts' own tokens, 1,024 chunks 2.1%, 128 chunks 19%. The daemon uses smaller ones
#: (`Pacing.batch_chunks`) so that less work is redone after a crash and a note in flight is
#: not held back long.
BATCH_CHUNKS = 4096
#: Inside a batch, the vectors embedded are recorded (with their records in the store) once
#: this many texts or seconds of embedding have passed, whichever comes first: a stopped or
#: killed first index keeps all but the last few seconds of its work. Measured to cost nothing
#: measurable on a first index (bench/speed/commit_cadence.py, docs/benchmarks.md).
COMMIT_CHUNKS = 256
COMMIT_SECONDS = 2.0

#: A note's bytes with the stat they were read under (and when).
Read = tuple[bytes, FileState]

#: Progress callback: (phase, done, total); total 0 means unknown.
Progress = Callable[[str, int, int], None]

#: Called at safe points of a long pass with the notes of the batch in flight (read, not yet
#: written); the daemon serves fresh edits of other notes there, and may raise to abandon the
#: pass (the work committed so far stays).
PausePoint = Callable[[frozenset[str]], None]

#: The longest stretch of hashing without a call to the pause point.
PAUSE_EVERY = 0.25


def quiet(phase: str, done: int, total: int) -> None:
    pass


class Pauses:
    """The pass in hand's pause point."""

    def __init__(self) -> None:
        self.point: PausePoint | None = None
        # Never called yet: the first throttled call goes through, however young the clock
        # (monotonic time starts near zero at boot, on a fresh CI machine too).
        self._last = -math.inf

    @contextlib.contextmanager
    def during(self, pause: PausePoint | None) -> Iterator[None]:
        # Passes nest: a fresh edit is served by a pass run from the outer pass's pause point.
        # The outer pass must get its pause point back, or it serves no edit after the first.
        outer = self.point
        self.point = pause
        try:
            yield
        finally:
            self.point = outer

    def __call__(self, in_flight: frozenset[str], *, throttle: bool = False) -> None:
        if self.point is None:
            return
        now = time.monotonic()
        if throttle and now - self._last < PAUSE_EVERY:
            return
        self._last = now
        self.point(in_flight)


@dataclass(frozen=True, slots=True)
class Pacing:
    """How a pass is cut up: what the caller chooses (the daemon smaller batches than a
    one-off index, a test tiny ones), given when the index is opened."""

    #: Chunks embedded in one batch (see BATCH_CHUNKS).
    batch_chunks: int = BATCH_CHUNKS
    #: How often a batch records the vectors embedded so far (see COMMIT_CHUNKS).
    commit_chunks: int = COMMIT_CHUNKS
    commit_seconds: float = COMMIT_SECONDS
    #: Notes to parse in one pass from which worker processes parse them (see POOL_ABOVE).
    pool_above: int = POOL_ABOVE


@dataclass(frozen=True, slots=True)
class PassSettings:
    """Everything a pass is set by, fixed when the indexer is made: how notes are read and
    chunked (from the config and the model), and the caller's pacing."""

    #: Tokens at most in a chunk (the model's budget, see `embedding.tokens.chunk_budget`).
    max_tokens: int
    #: Bytes at most in a note read (`[vault] max_file_mb`).
    max_bytes: int
    #: How files other than notes are read (their kinds, the extraction worker's limits).
    extraction: Extraction = field(default_factory=Extraction)
    pacing: Pacing = field(default_factory=Pacing)


@dataclass(frozen=True, slots=True)
class Scanned:
    """What the walk showed: the candidates to hash and the notes gone (`scan`), the notes
    that leave the found ones once the pass has forgotten them, and the counts."""

    scan: Scan
    went: frozenset[str]
    summary: Summary


@dataclass(frozen=True, slots=True)
class Hashed:
    """The candidates hashed: the changes, each note's share of the work for progress, and
    the bytes read, kept up to a bound for the parser."""

    changes: list[Change]
    weights: dict[str, int]
    kept: dict[str, Read]
    summary: Summary


@dataclass(frozen=True, slots=True)
class Written:
    """What the keyword phase wrote: the notes written, and its part of the summary."""

    paths: list[str]
    summary: Summary


@dataclass(frozen=True, slots=True)
class Embedded:
    """What the embedding phase did, and the notes it found chunked without the context their
    chunks are embedded with: the indexer reads them again at once."""

    summary: Summary
    rechunk: frozenset[str] = frozenset()
