"""`vaultd index` beyond the pass itself: stopping it cleanly, and handing it to a running daemon.

A signal sets a flag (as the daemon's do): the pass stops at its next safe point (between
two embedding runs, two batches, or while hashing), which keeps every vector finished so far
with its records in the store, and exits 128 + the signal's number, as a shell reports a
command a signal stopped. A pass waiting on a file reader (an image's OCR, up to
extract_timeout) or on parser workers would reach no safe point until they answer: the handler
ends them too (a kill, no lock taken), and the pass stops at once, nothing of their files
recorded. A second signal stops at once, until the process is gone, losing only what was not
yet recorded (a few seconds of embedding: the indexer records them as it goes).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

from vaultd.errors import NotReadyError

# The bar and the progress line are shared with `vaultd run` (vaultd.progress); `vaultd
# index` and `vaultd status` take them from here.
from vaultd.progress import Bar as Bar
from vaultd.progress import progress_line as progress_line

if TYPE_CHECKING:
    from vaultd.index.indexer import Summary

#: Progress callback: (phase, done, total), as `Indexer.reconcile` takes it.
Progress = Callable[[str, int, int], None]

#: How often a running daemon is asked how far its pass has come.
POLL_SECONDS = 0.5


class Stopped(Exception):
    """Raised at a safe point of the pass once SIGINT or SIGTERM asked it to stop."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StopSignals:
    """SIGINT and SIGTERM ask the pass to stop at its next safe point (`pause`); a second one
    ends the process at once."""

    def __init__(self) -> None:
        self.signum = 0
        #: What the first signal ends: the file readers and parser workers a pass may wait on.
        self._ends: tuple[Callable[[], None], ...] = ()

    def pause(self, in_flight: frozenset[str]) -> None:
        if self.signum:
            raise Stopped(self.signum)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.signum:
            os.write(2, b"vaultd: second signal, stopping now\n")
            os._exit(128 + signum)
        self.signum = signum
        for end in self._ends:
            end()

    def stopped(self) -> Stopped:
        """The stop a signal asked for, as the pass raises it at a safe point."""
        return Stopped(self.signum or signal.SIGINT)

    @contextmanager
    def installed(self) -> Iterator[StopSignals]:
        # Imported here, not in the handler (an import there could wait on the one it
        # interrupted), nor with this module (`vaultd status` uses it, and loads no index).
        from vaultd.index.parsers import stop_pools
        from vaultd.isolation import stop_children

        self._ends = (stop_children, partial(stop_pools, wait=False))
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {s: signal.signal(s, self._on_signal) for s in handled}
        try:
            yield self
        finally:
            # After a signal's stop, the handlers stay for the rest of the process's exit: a
            # second signal there exits at once, where Python's own would raise
            # KeyboardInterrupt inside the interpreter's exit and print a traceback.
            if not self.signum:
                for s, handler in previous.items():
                    signal.signal(s, handler)


class JsonProgress:
    """Progress as JSON lines on stderr (`vaultd index --json` when stderr is no terminal):
    {"progress": {"phase", "done", "total", "unit", "percent"}}, at most a few a second."""

    def __init__(self, every: float = 0.25) -> None:
        self.every = every
        self._last = 0.0
        self._phase = ""

    def __call__(self, phase: str, done: int, total: int) -> None:
        from vaultd.progress import UNITS

        now = time.monotonic()
        if phase == self._phase and done < total and now - self._last < self.every:
            return
        self._phase, self._last = phase, now
        line = {
            "phase": phase,
            "done": done,
            "total": total,
            "unit": UNITS.get(phase, ""),
            "percent": round(100 * done / total, 1) if total else None,
        }
        click.echo(json.dumps({"progress": line}), err=True)

    def close(self) -> None:
        pass


def stopped_report(stop: Stopped, counts: dict[str, int], embedded_now: int) -> dict[str, Any]:
    """What `vaultd index --json` prints when a signal stopped it."""
    return {
        "stopped": signal.Signals(stop.signum).name,
        "chunks_embedded": embedded_now,
        "chunks": counts["chunks"],
        "chunks_awaiting": counts["awaiting"],
        "notes": counts["notes"],
        "notes_embedded": counts["embedded"],
    }


def stopped_message(report: dict[str, Any]) -> str:
    from vaultd.hints import suggest

    kept = report["chunks"] - report["chunks_awaiting"]
    return (
        f"vaultd: stopped by {report['stopped']}; everything finished is kept: "
        f"{kept} of {report['chunks']} chunks embedded "
        f"({report['notes_embedded']} of {report['notes']} notes). "
        f"Run {suggest('index')} again to continue from there."
    )


def on_daemon(client: Any, progress: Progress) -> Summary:
    """Ask the running daemon for a full pass and follow it to its end; its summary.

    Every note is read, as `vaultd reindex` asks (the daemon watches the vault, so only what
    it missed costs more than that). Ctrl-C stops the waiting here, not the daemon's pass.
    """
    try:
        return _follow(client, progress)
    except KeyboardInterrupt:
        click.echo("\nvaultd: stopped waiting; the daemon goes on with the pass", err=True)
        sys.exit(128 + signal.SIGINT)


def _follow(client: Any, progress: Progress) -> Summary:
    from vaultd.api.client import RemoteService
    from vaultd.api.operations import ReindexRequest

    # Its refusals raised as the errors they stand for: a daemon still starting is NotReadyError.
    daemon = RemoteService(client)
    before = _status(daemon)
    while True:
        try:
            daemon.reindex(ReindexRequest())
            break
        except NotReadyError:
            time.sleep(POLL_SECONDS)
    started = before.get("last_reconcile_at")
    told = set(before.get("reasons") or {})
    while True:
        status = _status(daemon)
        for key, reason in (status.get("reasons") or {}).items():
            if key not in told:
                # The daemon retries a failed pass by itself: say why it is taking longer.
                told.add(key)
                click.echo(f"vaultd: the daemon reports: {reason}", err=True)
        snapshot = status.get("progress")
        if snapshot:
            progress(snapshot["phase"], snapshot["done"], snapshot["total"])
        finished = status.get("last_reconcile_at")
        queued = status.get("queue_depth", 0) or status.get("indexing") == "full reconcile"
        if finished is not None and finished != started and not queued:
            # Only here: `vaultd status` through a daemon takes its progress line from this
            # module, without the indexer and the model's runtime it imports.
            from vaultd.index.indexer import Summary

            summary = status.get("last_reconcile") or {}
            fields = Summary.__dataclass_fields__
            return Summary(**{k: v for k, v in summary.items() if k in fields})
        time.sleep(POLL_SECONDS)


def _status(daemon: Any) -> dict[str, Any]:
    from vaultd.api.operations import StatusRequest

    while True:
        try:
            status: dict[str, Any] = daemon.status(StatusRequest()).model_dump(mode="json")
            return status
        except NotReadyError:
            time.sleep(POLL_SECONDS)


def is_terminal() -> bool:
    return sys.stderr.isatty()
