"""How far a long pass has come and how long the rest will take, from measured throughput.

A pass has a "hash" phase (notes read to compare), an "index" phase (the keyword phase: notes
parsed, chunked and committed, counted in bytes of text, below) and an "embed" phase (chunks
awaiting vectors, counted in their tokens, which the model's time follows; each batch's share
moves with its embedding runs).

The indexer counts its "index" phase in bytes of text: each note's bytes less its comments
(`<!-- -->` and Obsidian's `%% %%`), which never reach the model. The figure is taken from the
bytes the pass reads to hash each note anyway, before anything is parsed, and the model's work
(nearly all of a first index) follows the length of the text it gets. Plain bytes did not: on
obsidian-hub a quarter of the vault (profile templates, mostly comments) holds half the tokens
per byte of the rest, and the estimate raced through it and then fell 20-35% short; bytes of
text hold 0.33-0.38 tokens each all through that vault. An exact copy of a note met before (a
copied folder, a move) counts a tenth of its bytes: its texts are embedded already, and what is
left (parsing, chunking, writing its records) costs about that. On a generated 50,000-note
vault whose later four-fifths are copies, plain bytes of text put the time left at nearly three
times the real one at 18% done, this at 1.7 times: copies whose bytes differ from their
original still count in full. (Those figures were measured when one phase did both; the
weights still follow the reading and chunking, and the copies' share is what parsing a copy
costs.) A note counts as done once its batch is written.

The time left is the text left at the rate of the phase so far (not a recent window: batches
of long and short notes alternate). The first seconds give no estimate, nor does a phase with
too little done to measure. Figures in docs/benchmarks.md.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

#: No estimate before this share of the work or this many seconds of it.
MIN_SHARE = 0.01
MIN_SECONDS = 5.0

UNITS = {"hash": "notes", "index": "bytes", "embed": "tokens"}

#: What a byte of an exact copy costs against a byte of new text (see above).
COPY_SHARE = 0.1

_COMMENTS = re.compile(rb"<!--.*?-->|%%.*?%%", re.DOTALL)


def text_weight(data: bytes, *, copy: bool = False) -> int:
    """The bytes of a note that reach the model, near enough: all but its comments; a share
    of them for a `copy` of content already seen, whose texts are embedded."""
    weight = len(data)
    if b"<!--" in data or b"%%" in data:
        weight -= sum(m.end() - m.start() for m in _COMMENTS.finditer(data))
    return round(weight * COPY_SHARE) if copy else weight


@dataclass(frozen=True, slots=True)
class Snapshot:
    phase: str
    done: int
    total: int
    unit: str
    elapsed_s: float
    eta_s: float | None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Snapshot:
        return cls(
            str(data["phase"]),
            int(data["done"]),
            int(data["total"]),
            str(data["unit"]),
            float(data["elapsed_s"]),
            None if data.get("eta_s") is None else float(data["eta_s"]),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "done": self.done,
            "total": self.total,
            "unit": self.unit,
            "percent": round(100 * self.done / self.total, 1) if self.total else None,
            "elapsed_s": round(self.elapsed_s, 1),
            "eta_s": None if self.eta_s is None else round(self.eta_s, 1),
        }


def estimate(done: int, total: int, elapsed: float) -> float | None:
    """Seconds left at the average rate so far, or None while there is too little to go on."""
    if total <= 0 or done <= 0 or elapsed < MIN_SECONDS or done < MIN_SHARE * total:
        return None
    return max(0.0, (total - done) * elapsed / done)


class Tracker:
    """The indexer's `Progress` callback that remembers the phase for status. Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._phase = ""
        self._started = 0.0
        self._done = 0
        self._total = 0

    def __call__(self, phase: str, done: int, total: int) -> None:
        with self._lock:
            if phase != self._phase or total != self._total or done < self._done:
                self._phase, self._total, self._started = phase, total, self._clock()
            self._done = done

    def clear(self) -> None:
        with self._lock:
            self._phase, self._done, self._total = "", 0, 0

    def snapshot(self) -> Snapshot | None:
        with self._lock:
            if not self._phase:
                return None
            elapsed = self._clock() - self._started
            return Snapshot(
                self._phase,
                self._done,
                self._total,
                UNITS.get(self._phase, "items"),
                elapsed,
                estimate(self._done, self._total, elapsed),
            )


def write_around_bars(stream: TextIO, text: str) -> None:
    """Write `text` to a terminal with the progress bars drawn on it cleared first and drawn
    again after, so that a line written meanwhile (a log line) never lands inside a bar."""
    from tqdm import tqdm

    with tqdm.external_write_mode(file=stream):
        stream.write(text)
        stream.flush()
