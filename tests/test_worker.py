"""The indexing worker as other threads read it: each answer read between two of the worker's
writes must still be one that can be true (a real index, a real worker thread; a reader's
moment is taken as soon as the worker writes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from watchdog.events import FileModifiedEvent

from harness.daemon import PATIENCE, wait_until
from tests.small_vault import write_vault
from vaultd.config import load_config
from vaultd.daemon.events import EventHub
from vaultd.daemon.state import State
from vaultd.daemon.worker import Worker
from vaultd.index.open import Index, open_index
from vaultd.pipeline.watch import Watcher


@pytest.fixture
def index(tmp_path: Path) -> Iterator[Index]:
    config = write_vault(tmp_path, {"A.md": "# A\n\nOtters hold hands.\n"})
    with open_index(load_config(config, env={}), env={}) as opened:
        yield opened


def test_a_pass_is_told_done_once_status_shows_it_done(index: Index) -> None:
    """A status read on hearing `pass_done` showed the pass not done: the first full pass with
    the daemon still "starting" and no reconcile, an edit's pass still degraded by the full
    disk it had recovered from; and a status read as the pass's name was cleared showed an
    idle daemon with the pass's progress."""
    workers: list[Worker] = []
    told: list[dict[str, Any]] = []
    cleared: list[object] = []

    class Hub(EventHub):
        def publish(self, kind: str, **fields: Any) -> None:
            if kind == "pass_done":
                told.append({**state.snapshot(), "full": fields["full"]})
            super().publish(kind, **fields)

    class Recording(State):
        def __setattr__(self, name: str, value: Any) -> None:
            super().__setattr__(name, value)
            if name == "indexing" and value == "" and workers:
                cleared.append(workers[0].progress.snapshot())

    state = Recording(events=Hub())
    worker = Worker(index, Watcher(index.vault, settle=0.0), state)
    workers.append(worker)
    worker.start()
    try:
        wait_until(lambda: len(told) == 1, "the first full pass", PATIENCE)
        state.degrade("disk", "no space left on the disk holding the index")
        (index.vault / "A.md").write_text("# A\n\nOtters hold hands; herons wade.\n")
        worker.request_paths({"A.md"})
        wait_until(lambda: len(told) == 2, "the edit's pass", PATIENCE)
    finally:
        worker.stop()
        worker.join(PATIENCE)
    first, edit = told
    assert first["full"] and first["status"] == "ok" and first["last_reconcile"] is not None
    assert first["indexing"] == ""
    assert not edit["full"] and edit["status"] == "ok" and edit["reasons"] == {}
    assert cleared == [None]


def test_idle_is_never_told_while_an_edit_is_taken_between_its_reads(index: Index) -> None:
    """`wait_for: "idle"` could answer with an edit in hand: idle() read `busy` before the
    watcher's queue, and the worker's step began between the two reads."""
    workers: list[Worker] = []
    racing: list[bool] = []

    class Racing(Watcher):
        def pending(self) -> int:
            if racing and super().pending():
                racing.clear()
                # The worker's step begins while idle() reads, as Worker._step orders it:
                # busy, then the edit taken off the watcher's queue.
                workers[0].busy = True
                self.take(force=True)
            return super().pending()

    watcher = Racing(index.vault, settle=0.0)
    worker = Worker(index, watcher, State())
    workers.append(worker)
    worker.start()
    try:
        wait_until(worker.idle, "the first full pass", PATIENCE)
    finally:
        worker.stop()
        worker.join(PATIENCE)
    watcher.on_any_event(FileModifiedEvent(str(index.vault / "A.md")))
    racing.append(True)
    assert not worker.idle()
    assert not racing and worker.busy, "the step began between the reads"
