"""The single indexing worker: the one thread that changes the index.

It runs full reconciles and the settled edits the watcher hands it, pacing bulk work with the
governor and pausing it between two batches so that a fresh edit is served first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection

import structlog

from vaultd.daemon.governor import CpuMeter, Governor, process_cpu
from vaultd.daemon.memory import trim_heap
from vaultd.daemon.state import State
from vaultd.errors import PassStoppedError, VaultdError
from vaultd.index.indexer import Summary
from vaultd.index.open import Index
from vaultd.index.parsers import stop_pools
from vaultd.isolation import children_cpu, release_children, stop_children
from vaultd.pipeline.watch import Settled, Watcher
from vaultd.progress import Bar, Tracker
from vaultd.records import kind_of
from vaultd.storage.chroma import is_disk_full

log = structlog.get_logger(__name__)

#: Chunks per batch of bulk work. A fresh edit does not wait for a batch (the indexer pauses
#: between two embedding runs); only an edit to a note of the batch in flight waits for it to
#: be written, about 20 s on two cores. Smaller batches pad more: 128 chunks cost 19% more
#: model time than one length-sorted pass on obsidian-hub, 1,024 chunks 2%.
BULK_BATCH_CHUNKS = 1024
#: Padded tokens per embedding run in the daemon: about half a second of work on two cores,
#: the longest a fresh edit waits behind the backlog.
INTERACTIVE_RUN_TOKENS = 2048
#: The most often a pass's progress is published as a `phase` event (a new phase always is).
PHASE_EVERY = 1.0
#: Back-off after the worker hit an error, so a persistent fault does not spin.
ERROR_BACKOFF = 5.0
#: The longest an edit that no stat shows (see `pipeline/detect.py`) stays unindexed: each
#: scheduled rescan reads its share of the vault whatever the stats say (the notes hashed
#: longest ago), 1/24 at the default hourly rescan. Reading all of a vault costs several times
#: its stat walk (docs/benchmarks.md); a rotation keeps a rescan near the walk's cost.
CHECK_CYCLE = 24 * 3600.0


#: A file at least this big is heavy (see `_heavy`), whatever its kind.
HEAVY_BYTES = 1 << 20
#: Kinds read by a child process under a time limit (a PDF's pages, OCR of an image): seconds
#: of work for a file of any size.
HEAVY_KINDS = frozenset({"pdf", "image"})


def check_share(rescan_seconds: float) -> float:
    """The share of the vault one rescan every `rescan_seconds` reads to cover CHECK_CYCLE."""
    return min(1.0, rescan_seconds / CHECK_CYCLE)


class _Stopping(Exception):
    """Raised inside the worker to abandon a long reconcile between two batches."""


class Worker(threading.Thread):
    """The single writer: every change to the index goes through this thread."""

    def __init__(
        self, index: Index, watcher: Watcher, state: State, *, display: Bar | None = None
    ) -> None:
        super().__init__(name="vaultd-worker", daemon=True)
        #: Where a person sees a full pass move (`progress.pass_display`), if anywhere.
        self.display = display
        self.index = index
        self.watcher = watcher
        self.state = state
        self.stop_event = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._full = True  # the first thing to do is a full reconcile
        #: The largest share of the vault a requested full pass must read whatever its stat.
        self._check = 0.0
        self._paths: set[str] = set()
        #: Of `_paths`, those named by the user: read whatever their stat.
        self._verify: set[str] = set()
        self._dirs: set[str] = set()
        self.paused = False
        self.busy = False
        self._in_interactive = False
        #: Where the full pass in hand has come; status reports it with the time left.
        self.progress = Tracker()
        #: The last phase published as an event, and when.
        self._phase = ""
        self._phase_at = 0.0
        embedding = index.config.embedding
        # The parser's worker processes and the extraction workers (PDF, OCR) are this
        # daemon's load, not other programs'.
        meter = CpuMeter(own_cpu=lambda: process_cpu() + index.indexer.helper_cpu + children_cpu())
        self.governor = Governor(embedding.cpu_budget, embedding.yield_above, meter=meter)
        self._bulk = False
        #: Seconds unused after which the store's index and the model are closed (0: never).
        self.unload_after = index.config.schedule.unload_seconds

    # -- requests from other threads -----------------------------------------------------------

    def request_full(self, check: float = 0.0) -> None:
        """Queue a full pass that reads the `check` share of the vault whatever the stats say
        (see `Indexer.reconcile`)."""
        with self._lock:
            self._full = True
            self._check = max(self._check, check)
        self._wake.set()

    def request_paths(self, paths: set[str], *, verify: bool = False) -> None:
        """Queue these notes; with `verify` (named by the user) each is read and hashed."""
        with self._lock:
            self._paths |= paths
            if verify:
                self._verify |= paths
        self._wake.set()

    def idle(self) -> bool:
        # The queues before `busy`, the reverse of the order `_step` writes them in: work taken
        # off a queue between two reads is then seen in hand, never lost between the two.
        waiting = self.watcher.pending()
        with self._lock:
            queued = self._full or bool(self._paths) or bool(self._dirs)
        return not waiting and not queued and not self.busy

    def queue_depth(self) -> int:
        with self._lock:
            queued = len(self._paths) + len(self._dirs) + (1 if self._full else 0)
        return queued + self.watcher.pending()

    def stop(self) -> None:
        self.stop_event.set()
        self._wake.set()

    def end(self, timeout: float) -> None:
        """Stop, and wait up to `timeout` for the batch in flight to finish."""
        self.stop()
        # The pass may be waiting on a parser worker or a file reader (an image's OCR: seconds,
        # up to extract_timeout), where no stop is looked at: they are ended now, the pass
        # stops at once, and what they had in hand is read again by the next start.
        stop_pools()
        stop_children()
        self.join(timeout)
        if self.is_alive():
            log.warning("the batch in flight did not finish in time; abandoning it")

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> None:
        worked = False
        while not self.stop_event.is_set():
            try:
                if self._step():
                    worked = True
                else:
                    if worked:
                        # Idle now: the arena the backlog's batches grew, and the heap's
                        # free pages, are handed back.
                        worked = False
                        self.index.embedder.release_memory()
                        trim_heap()
                    if self.unload_after > 0 and self._unload_unused():
                        trim_heap()
                    due = self.watcher.next_due()
                    self._wake.wait(0.2 if due is None else min(max(due, 0.01), 0.2))
                    self._wake.clear()
            except _Stopping:
                break
            except PassStoppedError:
                # Only the daemon's stop raises it (see Daemon._stop_worker): the readers the
                # pass waited on were ended, and nothing of their files is recorded.
                break
            except VaultdError as exc:
                if is_disk_full(exc):
                    # The write that failed was the store's or the manifest's: nothing after it
                    # was recorded, so the retry finds the same work once space is freed.
                    log.error(
                        "indexing failed: no space left for the index; retrying",
                        data=str(self.index.data_dir),
                        error=str(exc),
                    )
                    self.state.degrade(
                        "disk",
                        f"no space left on the disk holding {self.index.data_dir} ({exc}); "
                        "indexing resumes by itself once space is freed",
                    )
                else:
                    log.error("indexing failed; retrying", error=str(exc))
                    self.state.degrade("indexing", str(exc))
                # The pass that failed took its work off the queue; a full pass repairs the
                # store from the manifest (`sync_store`) and redoes whatever was lost.
                self.request_full()
                self.stop_event.wait(ERROR_BACKOFF)
            except Exception:
                log.exception("unexpected error in the indexing worker; retrying")
                self.state.degrade("indexing", "unexpected error; see the log")
                self.request_full()
                self.stop_event.wait(ERROR_BACKOFF)
            finally:
                self.busy = False

    def _step(self) -> bool:
        """Do one unit of work; False when there was nothing to do."""
        if self.paused:
            return False
        # Busy before taking anything off a queue: in between, idle() would be true with work
        # in hand, and a `wait_for: "idle"` could answer too early.
        self.busy = True
        settled = self.watcher.take()
        if settled.full:
            self._lost_events()
        with self._lock:
            full, self._full = self._full, False
            check, self._check = self._check, 0.0
            requested, self._paths = self._paths, set()
            requested_dirs, self._dirs = self._dirs, set()
            verify, self._verify = self._verify, set()
        if full:
            # A full pass reads what the stats cannot vouch for; the names asked for are read
            # by a pass of their own.
            if verify:
                self.request_paths(verify, verify=True)
            self._full_reconcile(check)
            return True
        if settled or requested or requested_dirs:
            settled.paths |= requested
            settled.dirs |= requested_dirs
            # The light first, in a pass of their own: a heavy file of the same batch would
            # hold them until it is written, and a pass served at a pause point pauses no more.
            heavy = self._heavy(settled.paths)
            if heavy and heavy != settled.paths:
                self._defer(settled, heavy, verify)
            self._incremental(settled, verify)
            return True
        self.busy = False
        return False

    def _unload_unused(self) -> bool:
        """Close the store's index, the model and the file readers (`isolation`'s extraction
        workers: an OCR engine holds about 0.9 GB) once unused for `unload_after`.

        A daemon left running for days should hold at rest what it needs to answer, not every
        vector of the vault: Chroma keeps a collection's whole HNSW index in memory from its
        first use (447 MB for 221,814 chunks), the model about 100 MB. The next search or edit
        opens them again, about a second for that index. Searches (on the server's threads)
        and writes mark them used, so neither is closed under a search or a pass.
        """
        store = self.index.store.release(self.unload_after)
        model = self.index.embedder.unload(self.unload_after)
        readers = release_children(self.unload_after)
        if store or model or readers:
            log.info(
                "unused for a while: closed to free their memory until the next use",
                vector_index=store,
                model=model,
                file_readers=readers,
                unused_s=round(self.unload_after),
            )
        return store or model or bool(readers)

    def _lost_events(self) -> None:
        # The kernel's queue overflowed, the pending set did, or the root moved: what changed
        # is unknown, so only comparing everything is safe. Never silent.
        log.warning("file events were lost; reconciling the whole vault")
        self.request_full()

    def _full_reconcile(self, check: float = 0.0) -> None:
        self.state.indexing = "full reconcile"
        self._bulk = True
        self.governor.resumed()
        try:
            summary = self.index.indexer.reconcile(
                self._progressed, pause=self._between_batches, check=check
            )
        finally:
            self._bulk = False
            self.governor.finished()
            # The progress before the pass's name, the reverse of the order they are set in
            # (status reads the progress first): an idle daemon never shows a pass's progress.
            self.progress.clear()
            self._phase = ""
            self.state.indexing = ""
            if self.display is not None:
                self.display.finished()
        self._succeeded()
        # A store moved aside at start-up is whole again after one full pass.
        self.state.recover("store")
        self.state.reconciled(summary.as_dict())
        self.state.started()
        # Told after the state it implies: a status read on hearing it shows the pass done.
        self.state.events.publish("pass_done", full=True, summary=summary.as_dict())

    def _incremental(self, settled: Settled, verify: Collection[str] = ()) -> Summary:
        if settled.undecodable:
            # Reported now, not at the next full walk; on this thread, the one the walk runs on.
            self.index.indexer.discovery.report_undecodable(settled.undecodable)
            if not (settled.paths or settled.dirs):
                return Summary()
        summary = self.index.indexer.reconcile_paths(
            settled.paths, settled.dirs, pause=self._between_batches, verify=verify
        )
        lag = time.monotonic() - settled.first_event if settled.first_event else None
        changed = summary.notes_changed + summary.notes_moved + summary.notes_deleted
        self._succeeded()
        self.state.committed(lag if changed or summary.notes_touched else None)
        # Told after the state it implies, as a full pass is.
        if changed or summary.notes_touched or summary.notes_failed or summary.notes_left_out:
            self.state.events.publish(
                "pass_done",
                full=False,
                summary=summary.as_dict(),
                **({"lag_seconds": round(lag, 3)} if lag is not None else {}),
            )
        return summary

    def _progressed(self, phase: str, done: int, total: int) -> None:
        """The indexer's progress: kept for status, published when a phase begins and at
        most every PHASE_EVERY seconds within one."""
        self.progress(phase, done, total)
        if self.display is not None:
            self.display(phase, done, total)
        now = time.monotonic()
        if phase == self._phase and now - self._phase_at < PHASE_EVERY and done < total:
            return
        self._phase, self._phase_at = phase, now
        snapshot = self.progress.snapshot()
        if snapshot is not None:
            self.state.events.publish("phase", progress=snapshot.as_json())

    def _succeeded(self) -> None:
        self.state.recover("indexing")
        self.state.recover("disk")

    def _between_batches(self, in_flight: frozenset[str]) -> None:
        """Called by the indexer at safe points of a long pass (`in_flight`: the notes read
        for the batch being embedded, not yet written)."""
        if self.stop_event.is_set():
            raise _Stopping
        if self._in_interactive:
            return
        self._serve_fresh(in_flight)
        if self._bulk:
            self._rest(in_flight)

    def _rest(self, in_flight: frozenset[str]) -> None:
        """Bulk work rests as the governor says, serving fresh edits meanwhile."""
        delay = self.governor.rest()
        end = time.monotonic() + delay
        while (left := end - time.monotonic()) > 0:
            if self.stop_event.is_set():
                raise _Stopping
            self._wake.wait(min(left, 0.2))
            self._wake.clear()
            self._serve_fresh(in_flight)
        self.governor.resumed()

    def _serve_fresh(self, in_flight: frozenset[str]) -> None:
        # An edit made during a big backlog is served first, not after the backlog.
        settled = self.watcher.take()
        if settled.full:
            self._lost_events()
        with self._lock:
            requested, self._paths = self._paths, set()
            requested_dirs, self._dirs = self._dirs, set()
            settled.paths |= requested
            settled.dirs |= requested_dirs
            # A note whose older content is in flight waits until that batch is written, or the
            # batch would then overwrite what is indexed now.
            held = {p for p in settled.paths if p in in_flight}
            held_dirs = {d for d in settled.dirs if _holds_any(d, in_flight)}
            self._paths |= held
            self._dirs |= held_dirs
            settled.paths -= held
            settled.dirs -= held_dirs
            verify = self._verify & settled.paths
            self._verify -= verify
        # A fresh edit is served here because it is quick; the pass serving it pauses for no
        # other edit. A heavy file waits for the next pass of its own, which does.
        heavy = self._heavy(settled.paths)
        if heavy:
            self._defer(settled, heavy, verify)
        if settled.paths or settled.dirs or settled.undecodable:
            self._in_interactive = True
            try:
                self._incremental(settled, verify)
            finally:
                self._in_interactive = False

    def _heavy(self, paths: Collection[str]) -> set[str]:
        """Of `paths`, the files whose reading or embedding takes seconds: a PDF or an image
        (read by a child process), or a file of HEAVY_BYTES or more (a canvas of thousands of
        cards, a long export). A path gone is light: its deletion is quick."""
        vault = self.index.vault
        heavy = set()
        for path in paths:
            if kind_of(path) in HEAVY_KINDS:
                heavy.add(path)
                continue
            try:
                if (vault / path).lstat().st_size >= HEAVY_BYTES:
                    heavy.add(path)
            except OSError:
                pass
        return heavy

    def _defer(self, settled: Settled, heavy: set[str], verify: set[str]) -> None:
        """Take `heavy` out of `settled` and queue it (named by the user still, if it was)."""
        settled.paths -= heavy
        named = verify & heavy
        verify -= named
        # No wake: the loop takes the queue again as soon as the pass in hand ends (a wake
        # here would spin a governor's rest, which serves fresh edits on every wake).
        with self._lock:
            self._paths |= heavy
            self._verify |= named


def _holds_any(folder: str, paths: frozenset[str]) -> bool:
    prefix = folder.strip("/") + "/"
    return any(p.startswith(prefix) for p in paths)
