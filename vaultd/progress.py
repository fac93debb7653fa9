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
import sys
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


#: How the bar and the progress line name the indexer's phases.
PHASE_NAMES = {"index": "keyword index", "embed": "embedding"}


class Bar:
    """A pass's progress where its user looks: a bar with counts and time left on a terminal
    (`vaultd index`, `vaultd run`); elsewhere a line every `every` seconds, given to `say`
    (`vaultd index` prints it; the daemon logs it).

    The "index" phase (reading, chunking, the keyword index) counts bytes of text and the
    "embed" phase tokens, so rate and time left follow the work; the time left is the average
    rate of the phase so far. Called from one thread at a time (the pass's).
    """

    def __init__(
        self,
        enabled: bool,
        *,
        tty: bool | None = None,
        say: Callable[[Snapshot], None] | None = None,
        every: float = 5.0,
    ) -> None:
        self.enabled = enabled
        self.tty = sys.stderr.isatty() if tty is None else tty
        self._say = say or _print_line
        self._every = every
        self._bar: Any = None
        self._tracker = Tracker()
        self._phase = ""
        self._last = 0.0
        self._line = ""
        # The keyword phase reports a batch as its writer thread finishes it.
        self._lock = threading.RLock()

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        with self._lock:
            self._show(phase, done, total)

    def _show(self, phase: str, done: int, total: int) -> None:
        self._tracker(phase, done, total)
        if phase != self._phase:
            self.close()
            self._phase = phase
            self._last = 0.0
            if self.tty and total:
                from tqdm import tqdm

                in_bytes = phase == "index"
                self._bar = tqdm(
                    total=total,
                    desc=PHASE_NAMES.get(phase, phase),
                    unit="B" if in_bytes else "tok" if phase == "embed" else "note",
                    unit_scale=in_bytes or phase == "embed",
                    unit_divisor=1024,
                    smoothing=0,  # the phase's average rate, as the daemon's status uses
                    file=sys.stderr,
                )
        if self._bar is not None:
            self._bar.update(done - self._bar.n)
        elif total and (time.monotonic() - self._last > self._every or done == total):
            snapshot = self._tracker.snapshot()
            line = progress_line(snapshot)
            if snapshot is not None and line != self._line:
                self._last, self._line = time.monotonic(), line
                self._say(snapshot)

    def close(self) -> None:
        """End the bar of the phase in hand (the pass is done, or the next phase begins)."""
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None

    def finished(self) -> None:
        """The pass is over: the next one begins afresh, even in a phase of the same name."""
        with self._lock:
            self.close()
            self._phase = ""
            self._line = ""
            self._tracker.clear()


#: How often `vaultd run` off a terminal logs the progress of a pass (and when a phase begins
#: and ends): a first index of a big vault is an hour, and a line a minute says it moves
#: without burying the rest of the log.
LOG_EVERY = 60.0


def pass_display(tty: bool | None = None) -> Bar:
    """`vaultd run`'s view of a full pass: the bar on a terminal, as `vaultd index` draws it;
    elsewhere (a service's journal, a log file) an `indexing` log line with the phase, the
    counts and the time left, at most every LOG_EVERY seconds."""
    return Bar(True, tty=tty, say=_log_progress, every=LOG_EVERY)


def _log_progress(snapshot: Snapshot) -> None:
    import structlog

    structlog.get_logger("vaultd.progress").info(
        "indexing",
        phase=PHASE_NAMES.get(snapshot.phase, snapshot.phase),
        percent=round(100 * snapshot.done / snapshot.total) if snapshot.total else None,
        done=snapshot.done,
        total=snapshot.total,
        unit=snapshot.unit,
        left_ms=None if snapshot.eta_s is None else round(snapshot.eta_s * 1000),
    )


def _print_line(snapshot: Snapshot) -> None:
    print(progress_line(snapshot), file=sys.stderr, flush=True)


def progress_line(snapshot: Snapshot | None) -> str:
    """`embedding: 42% (1234/2900 tokens), about 3 min 10 s left`."""
    if snapshot is None or not snapshot.total:
        return ""
    if snapshot.unit == "bytes":
        scale, name = (1048576, "MiB") if snapshot.total >= 1048576 else (1024, "KiB")
        counts = f"{snapshot.done / scale:.1f} of {snapshot.total / scale:.1f} {name} of text"
    else:
        counts = f"{snapshot.done}/{snapshot.total} {snapshot.unit}"
    phase = PHASE_NAMES.get(snapshot.phase, snapshot.phase)
    line = f"{phase}: {100 * snapshot.done / snapshot.total:.0f}% ({counts})"
    if snapshot.eta_s is not None and snapshot.done < snapshot.total:
        line += f", about {time_left(snapshot.eta_s)} left"
    return line


def time_left(seconds: float) -> str:
    """A time left as a person reads it: `42 s`, `3 min 05 s`, `1 h 02 min`."""
    seconds = round(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds} s"
