"""What the phases of a pass share: the parts they work with, its pause points and its
progress callback."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from vaultd.embedding.embedder import TextEmbedder
from vaultd.faults import Faults
from vaultd.index.outcomes import Outcomes
from vaultd.index.writer import Writer
from vaultd.pipeline.discover import Discovery
from vaultd.storage.manifest import Manifest
from vaultd.storage.vectors import VectorStore

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
class Parts:
    """What every phase works with: one of each, made by the indexer."""

    discovery: Discovery
    manifest: Manifest
    store: VectorStore
    embedder: TextEmbedder
    #: Writes records to the store while the model embeds; closed with the indexer.
    writer: Writer
    faults: Faults
    outcomes: Outcomes
    pauses: Pauses

    @property
    def model_id(self) -> str:
        return self.embedder.model_id
