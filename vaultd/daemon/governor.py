"""Pacing the daemon's bulk work so that the machine stays its user's.

A first index of a big vault is an hour of model time on a laptop. Two rules keep it polite,
on top of the low CPU and IO priority the service files ask for (a nice level only helps
against programs that are themselves busy; it does nothing for heat, fans and battery):

- a budget: bulk work runs at most `[embedding] cpu_budget` of the time, resting after each
  embedding run in proportion to how long the run took;
- yielding: while other programs keep more than `[embedding] yield_above` of all cores busy,
  bulk work slows down: it rests 1 s at first and twice as long each time the machine is
  still busy, up to 30 s, checking between rests, but never more than three times as long
  as it just worked (YIELD_FLOOR): a busy machine slows a first index to a quarter of its
  pace at the most, and never stops it. Rests alone once let a machine kept busy by others
  hold a first index for as long as they ran: a 30 s rest after each half-second embedding
  run is 2% of the time, and nothing seemed to move for minutes.

Both settings change on a reload (SIGHUP), as `configure` applies them.

Only bulk work is paced: the worker serves fresh edits during the rests, and an edit is
never held back by either rule.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from vaultd.answers import GovernorStatus

log = structlog.get_logger(__name__)

YIELD_FIRST = 1.0
YIELD_MAX = 30.0
#: While it yields, bulk work still runs at least this share of the time: a rest is at most
#: (1 - YIELD_FLOOR) / YIELD_FLOOR times the work just done. A quarter keeps most of the
#: cores to the programs that keep the machine busy while a first index still ends (figures
#: in docs/benchmarks.md, "A first index beside a busy machine").
YIELD_FLOOR = 0.25
#: The `[embedding]` settings a reload applies to a running daemon; the others (the model, its
#: precision, threads and batch size) were used to load the model and wait for a restart.
LIVE_SETTINGS = ("cpu_budget", "yield_above")
#: The shortest span a CPU reading is taken over (see `CpuMeter`).
MIN_WINDOW = 1.0

#: /proc/stat's cpu line: user nice system idle iowait irq softirq steal ...
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


def process_cpu() -> float:
    """CPU seconds this process has used (not its live child processes')."""
    times = os.times()
    return times.user + times.system


@dataclass(frozen=True, slots=True)
class Reading:
    at: float
    machine_busy: float | None
    own: float


class CpuMeter:
    """The share of all cores that other processes used between two readings.

    On Linux from /proc/stat (all busy time) less this process's own CPU time; elsewhere from
    the one-minute load average less this process's share, which is coarser but needs nothing.

    A reading spans at least `MIN_WINDOW`: /proc/stat advances in clock ticks, and in a virtual
    machine the guest's kernel charges the ticks it missed while the host held a virtual CPU
    all at once, so over a few tenths of a second it can count more busy time than the cores
    have. Such a window once read as "others keep every core busy" with nothing else running,
    and bulk work waited for nobody. For the same reason busy time is capped at what the cores
    can give in the window.
    """

    def __init__(
        self,
        stat: Path = Path("/proc/stat"),
        *,
        clock: Callable[[], float] = time.monotonic,
        own_cpu: Callable[[], float] = process_cpu,
    ) -> None:
        self._stat = stat
        self._clock = clock
        self._own_cpu = own_cpu
        self._cores = os.cpu_count() or 1
        self._ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last = self._read()

    def _read(self) -> Reading:
        return Reading(self._clock(), self._machine_busy(), self._own_cpu())

    def _machine_busy(self) -> float | None:
        if not sys.platform.startswith("linux"):
            return None
        try:
            with self._stat.open() as handle:
                fields = handle.readline().split()[1:]
            return sum(int(fields[i]) for i in _BUSY_FIELDS if i < len(fields)) / self._ticks
        except (OSError, ValueError, IndexError):
            return None

    def others(self) -> float | None:
        """Others' share of all cores since the last reading, or None when it is too soon to
        tell (the window then runs on to the next call) or it cannot tell."""
        if self._clock() - self._last.at < MIN_WINDOW:
            return None
        now = self._read()
        last, self._last = self._last, now
        wall = now.at - last.at
        own = (now.own - last.own) / (wall * self._cores)
        if now.machine_busy is not None and last.machine_busy is not None:
            busy = min(1.0, (now.machine_busy - last.machine_busy) / (wall * self._cores))
            return min(1.0, max(0.0, busy - own))
        try:
            load = os.getloadavg()[0] / self._cores
        except OSError:
            return None
        return min(1.0, max(0.0, load - own))


class Governor:
    """Says how long bulk work should rest before its next embedding run."""

    def __init__(
        self,
        cpu_budget: float = 1.0,
        yield_above: float = 0.5,
        *,
        meter: CpuMeter | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cpu_budget = cpu_budget
        self.yield_above = yield_above
        self._meter = meter if meter is not None else CpuMeter()
        self._clock = clock
        self._resumed = clock()
        self._backoff = 0.0
        #: When bulk work began to wait for the busy machine (epoch seconds, None while it does
        #: not) and others' share of all cores at the last check: one fact, set in one
        #: assignment on the worker's thread, since status reads it on another.
        self._seen: tuple[float | None, float | None] = (None, None)

    @property
    def busy_since(self) -> float | None:
        return self._seen[0]

    @property
    def others(self) -> float | None:
        return self._seen[1]

    @property
    def yielding(self) -> bool:
        """Whether bulk work is waiting for the machine to be quiet again."""
        return self.busy_since is not None

    def configure(self, cpu_budget: float, yield_above: float) -> None:
        """Apply reloaded settings; the next rest follows them."""
        self.cpu_budget = cpu_budget
        self.yield_above = yield_above

    def status(self) -> GovernorStatus:
        """What status reports, from one read: whether bulk work waits, since when and the
        share others use are one fact, and `rest` writes it on the worker's thread."""
        since, others = self._seen
        return GovernorStatus(
            cpu_budget=self.cpu_budget,
            yield_above=self.yield_above,
            yielding=since is not None,
            waiting_for_busy_machine=since is not None,
            busy_since=since,
            others_share=others,
            floor=YIELD_FLOOR,
        )

    def finished(self) -> None:
        """The bulk work is done: nothing waits any more, and the next bulk pass looks afresh."""
        self._backoff = 0.0
        self._seen = (None, self.others)

    def rest(self) -> float:
        """Seconds to rest now, after the work done since `resumed`."""
        worked = max(0.0, self._clock() - self._resumed)
        delay = worked * (1 - self.cpu_budget) / self.cpu_budget
        # The longest a busy machine may hold bulk work back after this much work.
        most = worked * (1 - YIELD_FLOOR) / YIELD_FLOOR
        if self.yield_above < 1:
            others = self._meter.others()
            if others is None:
                # Too soon to tell (under MIN_WINDOW since the last reading): carry on as before.
                return max(delay, min(self._backoff, most))
            if others > self.yield_above:
                since = self.busy_since
                if not self._backoff:
                    log.info(
                        "the machine is busy; bulk indexing slows down",
                        others_share=round(others, 2),
                        yield_above=self.yield_above,
                        floor=YIELD_FLOOR,
                    )
                    since = time.time()
                # With the share, in one assignment: status never shows bulk work waiting
                # beside a share under `yield_above`.
                self._seen = (since, others)
                self._backoff = min(max(self._backoff * 2, YIELD_FIRST), YIELD_MAX)
                delay = max(delay, min(self._backoff, most))
            else:
                if self._backoff:
                    log.info("the machine is quiet again; bulk indexing resumes")
                    self._backoff = 0.0
                self._seen = (None, others)
        return delay

    def resumed(self) -> None:
        """The rest is over (or was not needed): work time is counted from here."""
        self._resumed = self._clock()
