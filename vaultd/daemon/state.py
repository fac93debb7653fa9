"""The daemon's live state, as health checks, status and the socket API report it."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from vaultd.daemon.events import EventHub

Health = Literal["starting", "ok", "degraded"]
#: What the daemon is doing, as status shows it: `starting` until its first pass begins,
#: `indexing` while a full pass is in hand (the first index or a rescan; `progress` has its
#: phase), `idle` otherwise. The health stays `starting` until the first pass is done: the
#: service manager's READY and the clients that wait for a daemon go by it, while a person
#: reading status during a first index is told it indexes, and searches are answered.
Activity = Literal["starting", "indexing", "idle"]


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))
    return ordered[index]


@dataclass
class State:
    """Thread-safe: the worker writes, the server and the health job read."""

    health: Health = "starting"
    reasons: dict[str, str] = field(default_factory=dict)
    last_reconcile: dict[str, Any] | None = None
    last_reconcile_at: float | None = None
    indexing: str = ""
    #: Save-to-searchable lag in seconds of the last edits (event seen → committed).
    lags: deque[float] = field(default_factory=lambda: deque(maxlen=1000))
    #: Bumped after every committed change.
    generation: int = 0
    #: What happens as it happens, for `GET /v1/events` (vaultd.daemon.events).
    events: EventHub = field(default_factory=EventHub)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _listeners: list[Callable[[], None]] = field(default_factory=list)

    def listen(self, callback: Callable[[], None]) -> None:
        """Call `callback` after every change (a commit, a pass, the health), on the thread that
        made it and under the state's lock, so it must only hand the news on: how a long poll
        awaiting on the server's event loop learns that it may be done."""
        with self._lock:
            self._listeners.append(callback)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()

    def degrade(self, key: str, reason: str) -> None:
        with self._lock:
            self.reasons[key] = reason
            self._refresh()

    def recover(self, key: str) -> None:
        with self._lock:
            self.reasons.pop(key, None)
            self._refresh()

    def started(self) -> None:
        with self._lock:
            if self.health == "starting":
                self.health = "ok"
            self._refresh()

    def _refresh(self) -> None:
        if self.health != "starting":
            self.health = "degraded" if self.reasons else "ok"
        self._changed()

    def reconciled(self, summary: dict[str, Any]) -> None:
        with self._lock:
            self.last_reconcile = summary
            self.last_reconcile_at = time.time()
            self.generation += 1
            self._changed()

    def committed(self, lag: float | None = None) -> None:
        with self._lock:
            if lag is not None:
                self.lags.append(lag)
            self.generation += 1
            self._changed()

    def activity(self) -> Activity:
        if self.indexing:
            return "indexing"
        return "starting" if self.health == "starting" else "idle"

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            lags = list(self.lags)
            return {
                "status": self.health,
                "state": self.activity(),
                "reasons": dict(self.reasons),
                "indexing": self.indexing,
                "last_reconcile": self.last_reconcile,
                "last_reconcile_at": self.last_reconcile_at,
                "lag_seconds": {
                    "p50": percentile(lags, 0.5),
                    "p95": percentile(lags, 0.95),
                    "samples": len(lags),
                },
            }
