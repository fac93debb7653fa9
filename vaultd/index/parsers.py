"""Parsing and chunking notes, in this process or in worker processes on every core.

Parsing is pure Python and holds the GIL, so in one process the keyword phase of a big pass
(a first index) runs on one core while the others wait. For a pass with many notes the
indexer hands the parsing and chunking to a `ParserPool` of worker processes, while it reads
the files (through the discovery's symlink-safe opens), commits, and keeps every invariant
itself: the workers only turn bytes into a note and its chunks. A pass with few notes (a
watched edit) parses in process: a worker takes about a second to start.

The workers are spawned, never forked: the daemon has threads (the watcher's, the model's,
Chroma's), and a fork would copy the locks they hold. Each runs in a session of its own and
ignores SIGINT: the terminal's Ctrl-C is the parent's to act on. The parent ends them itself
(`close`, and `stop_pools` from another thread on a daemon's stop): SIGTERM, on which a worker
ends its file readers and exits, then SIGKILL for one that has not within a second. Left to
the executor, a closing pool would first finish every note already handed to its workers (for
images, seconds of OCR each), and the interpreter's exit waits for that. A worker also exits
when the parent does, however it ends: a parent killed with SIGKILL never closes the pool, and
the queue the workers wait on stays open (each worker holds both of its ends), so each watches
its parent's sentinel, the pipe that only the parent's death closes.

A worker that dies on a note (a crash in native code) breaks the pool, and every note in
its hands comes back unparsed. Those notes are then parsed one at a time in a fresh pool:
the one that kills its worker alone is reported failed, and the daemon itself stays up.
Workers that cannot start at all (a library caller's script that spawns more work when
imported again, as multiprocessing's spawn does to `__main__`) make the pool parse in
process for the rest of its life, with a warning: slower, never wrong.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

import structlog

from vaultd.embedding.spec import ModelSpec
from vaultd.embedding.tokens import TokenCounter
from vaultd.errors import LeftOutError, NoteError, PassStoppedError
from vaultd.index.extract import Extraction, extract_note
from vaultd.isolation import children_cpu, stop_children
from vaultd.pipeline.chunk import Counter, capped
from vaultd.records import Parsed

log = structlog.get_logger(__name__)

T = TypeVar("T")

#: A pass with at least this many notes to parse uses the pool (see the module's docstring).
POOL_ABOVE = 200
#: Notes handed to the pool ahead of the one the indexer waits for, per worker: enough that
#: no worker idles while the indexer commits a batch.
AHEAD_PER_WORKER = 48
#: The reason a note is failed with when it kills its worker alone.
CRASHED = "the parser crashed on this note (its worker process died); skipped"
#: How long a worker told to end (SIGTERM) has before it is killed.
END_GRACE = 1.0


def parse_and_chunk(
    path: str,
    data: bytes,
    counter: Counter,
    *,
    max_bytes: int,
    max_tokens: int,
    extraction: Extraction | None = None,
) -> Parsed:
    """Parse (or extract, by its kind) one file and cut it into chunks; never raises for the
    file's content."""
    try:
        note = extract_note(
            path,
            data,
            max_bytes=max_bytes,
            extraction=extraction,
            counter=counter,
            max_tokens=max_tokens,
        )
        max_chunks = (extraction or Extraction()).max_chunks
        note, chunks = capped(note, counter, max_tokens, max_chunks)
    except LeftOutError as exc:
        return Parsed(reason=exc.reason, kind=exc.kind)
    except NoteError as exc:
        return Parsed(reason=str(exc))
    except PassStoppedError:
        raise  # the process is stopping: not the note's doing
    except Exception as exc:
        # A parser or chunker bug met on one odd note must not stop the pass: the note fails
        # alone, and is quarantined if it keeps failing.
        return Parsed(
            reason=f"the parser failed: {type(exc).__name__}: {exc}",
            trace=traceback.format_exc(),
        )
    # The body and blocks are the chunks' now; nothing downstream reads them, and they would
    # cross from a worker for nothing.
    return Parsed(replace(note, body="", blocks=()), tuple(chunks))


# -- the worker's side ----------------------------------------------------------------------------

_worker: tuple[TokenCounter, int, int] | None = None


def _start_worker(spec: ModelSpec, max_bytes: int, max_tokens: int) -> None:
    global _worker
    # Out of the terminal's process group, and deaf to its Ctrl-C if it is sent anyway.
    with contextlib.suppress(OSError):
        os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Blocked since the spawn (`_spawning`): one sent meanwhile is dropped, being ignored now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGTERM, _on_term)
    _exit_with_parent()
    # The workers are the parallelism: the tokenizer's own threads would only contend.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _worker = (TokenCounter.for_spec(spec), max_bytes, max_tokens)


@contextlib.contextmanager
def _spawning() -> Iterator[None]:
    """SIGINT blocked in this thread while it may spawn workers. A spawned worker inherits the
    mask, so a Ctrl-C sent to the terminal's group while it starts (a second or more of
    imports) is held until `_start_worker` ignores it, where it would raise KeyboardInterrupt
    in the worker's start, print a traceback and break the pool. multiprocessing starts its
    resource tracker the same way."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _on_term(signum: int, frame: object) -> None:
    """The parent ends this worker: its file readers first (they are in sessions of their own,
    and would read on as orphans where the kernel does not end them with it), then itself."""
    stop_children()
    os._exit(0)


def _exit_with_parent() -> None:
    """End this worker as soon as the process that spawned it is gone (see the module's
    docstring); an orphan would otherwise wait on its queue forever."""
    parent = multiprocessing.parent_process()
    if parent is None or parent.sentinel is None:
        return

    def watch(sentinel: int) -> None:
        multiprocessing.connection.wait([sentinel])
        # Nobody is left to take a result or to shut the pool down cleanly.
        os._exit(0)

    threading.Thread(target=watch, args=(parent.sentinel,), name="parent", daemon=True).start()


def _parse_in_worker(
    path: str, data: bytes, extraction: Extraction | None = None
) -> tuple[Parsed, int, float]:
    """The note parsed, with the worker's pid and the CPU time it has used so far."""
    assert _worker is not None, "the pool's initializer runs first"
    counter, max_bytes, max_tokens = _worker
    parsed = parse_and_chunk(
        path, data, counter, max_bytes=max_bytes, max_tokens=max_tokens, extraction=extraction
    )
    # With its PDF and OCR workers' CPU: all of it is the daemon's bulk work.
    return parsed, os.getpid(), time.process_time() + children_cpu()


def _ready() -> None:
    """Nothing: submitted at start so the workers load while the indexer hashes."""


# -- the indexer's side ---------------------------------------------------------------------------

#: What the pool is given for each item: the note's path and bytes, or None to pass it
#: through unparsed (a note that could not be read).
Job = tuple[str, bytes] | None
_Done = tuple[Parsed, int, float]
_Slot = Future[_Done] | Parsed | None


@dataclass(slots=True)
class _Entry(Generic[T]):
    item: T
    job: Job
    slot: _Slot


class ParserPool:
    """Worker processes that parse and chunk notes, results in the order asked for."""

    def __init__(
        self,
        spec: ModelSpec,
        *,
        max_bytes: int,
        max_tokens: int,
        processes: int = 0,
        extraction: Extraction | None = None,
    ) -> None:
        self._args = (spec, max_bytes, max_tokens)
        self.extraction = extraction
        self.processes = processes or os.cpu_count() or 1
        self.ahead = AHEAD_PER_WORKER * self.processes
        #: Pools started, the first included (a crashed worker costs a restart).
        self.starts = 0
        #: Set once workers could not start: every note is then parsed in this process.
        self.in_process = False
        #: The CPU seconds each worker had used at its last note, by pid.
        self._cpu: dict[int, float] = {}
        #: Set by `stop`: every result not taken yet is lost to the stop, not to a crash.
        self._stopped = False
        self._executor, self._ready = self._start()
        _pools.add(self)

    def _start(self) -> tuple[ProcessPoolExecutor, Future[None]]:
        self.starts += 1
        executor = ProcessPoolExecutor(
            self.processes,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=self.initializer,
            initargs=self._args,
        )
        with _spawning():
            return executor, executor.submit(_ready)

    #: Run by each worker as it starts (a test swaps in one that fails).
    initializer: Callable[[ModelSpec, int, int], None] = staticmethod(_start_worker)

    def _restart(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._executor, self._ready = self._start()

    def _workers_failed(self) -> bool:
        """Whether the pool broke before any worker had started: none will."""
        try:
            self._ready.result()
        except BrokenProcessPool:
            return True
        return False

    def _give_up(self) -> None:
        log.warning(
            "parser worker processes could not start; parsing in this process (slower). "
            "A script that uses vaultd as a library must guard its entry point with "
            '`if __name__ == "__main__":`'
        )
        self.in_process = True
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _here(self, job: tuple[str, bytes]) -> Parsed:
        spec, max_bytes, max_tokens = self._args
        counter = TokenCounter.for_spec(spec)  # the tokenizer is loaded once per process
        return parse_and_chunk(
            *job, counter, max_bytes=max_bytes, max_tokens=max_tokens, extraction=self.extraction
        )

    @property
    def cpu_seconds(self) -> float:
        """CPU time the workers have used (as of their last note): this process's pacing
        counts it as its own, not as other programs' load."""
        return sum(self._cpu.values())

    def close(self) -> None:
        """Cancel what is queued and end the workers (see the module's docstring)."""
        _pools.discard(self)
        workers = self._workers()
        self._executor.shutdown(wait=False, cancel_futures=True)
        _end(workers)
        # The executor's own thread then sees its workers gone and ends: nothing is left for
        # the interpreter's exit to wait on.
        self._executor.shutdown(wait=True)

    def stop(self, wait: bool = True) -> None:
        """End the workers now, from another thread than the one taking results (a daemon's
        stop) or from a signal handler (`wait=False`: SIGTERM only, `close` finishes the
        job): the thread taking results gets PassStoppedError for every note not taken yet."""
        self._stopped = True
        workers = self._workers()
        if wait:
            _end(workers)
        else:
            for worker in workers:
                with contextlib.suppress(OSError, AttributeError, ValueError):
                    worker.terminate()

    def _workers(self) -> list[multiprocessing.process.BaseProcess]:
        # The executor's own table (no public one in 3.11), which its thread may change.
        processes = getattr(self._executor, "_processes", None) or {}
        while True:
            try:
                return list(processes.values())
            except RuntimeError:  # changed while copied
                continue

    def __enter__(self) -> ParserPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def parse_all(
        self, items: Iterable[T], job_of: Callable[[T], Job]
    ) -> Iterator[tuple[T, Parsed | None]]:
        """Each item with its note parsed (None for an item whose job is None), in order.

        `job_of` runs in this thread as items are taken, up to `ahead` items before the one
        whose result is yielded: the indexer reads and marks notes there.
        """
        window: deque[_Entry[T]] = deque()
        for item in items:
            job = job_of(item)
            window.append(_Entry(item, job, None if job is None else self._submit(job)))
            while len(window) > self.ahead:
                yield self._take(window)
        while window:
            yield self._take(window)

    def _submit(self, job: tuple[str, bytes]) -> Future[_Done] | Parsed:
        if self._stopped:
            raise PassStoppedError(job[0])
        if self.in_process:
            return self._here(job)
        try:
            with _spawning():  # a submit may start a worker
                return self._executor.submit(_parse_in_worker, *job, self.extraction)
        except (BrokenProcessPool, RuntimeError):
            if self._stopped:  # broken, or shut down, by the stop meanwhile
                raise PassStoppedError(job[0]) from None
            raise

    def _take(self, window: deque[_Entry[T]]) -> tuple[T, Parsed | None]:
        entry = window[0]
        if isinstance(entry.slot, Future):
            try:
                entry.slot = self._done(entry.slot.result())
            except BrokenProcessPool:
                if self._stopped:
                    raise PassStoppedError(entry.job[0] if entry.job else "") from None
                self._after_crash(window)
        window.popleft()
        assert not isinstance(entry.slot, Future)
        return entry.item, entry.slot

    def _done(self, done: _Done) -> Parsed:
        parsed, pid, cpu = done
        self._cpu[pid] = cpu
        return parsed

    def _after_crash(self, window: deque[_Entry[T]]) -> None:
        """A worker died: parse what the pool had in hand again, one note at a time."""
        lost = {id(e) for e in window if isinstance(e.slot, Future) and _broken(e.slot)}
        if self._stopped:  # ended by the stop meanwhile: no note's doing
            raise PassStoppedError()
        if self._workers_failed():
            self._give_up()
        else:
            log.error(
                "a parser worker died; parsing the notes it may have had one at a time",
                notes=len(lost),
            )
            self._restart()
        for entry in window:
            if isinstance(entry.slot, Future):
                # One finished before the crash keeps its result.
                entry.slot = (
                    self._alone(entry.job) if id(entry) in lost else self._done(entry.slot.result())
                )

    def _alone(self, job: Job) -> Parsed:
        assert job is not None
        slot = self._submit(job)
        if not isinstance(slot, Future):
            return slot
        try:
            return self._done(slot.result())
        except BrokenProcessPool:
            if self._stopped:  # ended by the stop, not by this note
                raise PassStoppedError(job[0]) from None
            if self._workers_failed():
                self._give_up()
                return self._here(job)
            log.error("a note crashed the parser", path=job[0])
            self._restart()
            return Parsed(reason=CRASHED)


#: The pools open in this process, for `stop_pools`.
_pools: weakref.WeakSet[ParserPool] = weakref.WeakSet()


def stop_pools(wait: bool = True) -> None:
    """End the workers of every pool open in this process (a daemon's stop, from its main
    thread; `vaultd index`'s, from its signal handler with `wait=False`): the pass waiting on
    them raises PassStoppedError at once, where it would wait for notes in their hands
    (seconds of OCR each)."""
    for pool in list(_pools):
        pool.stop(wait)


def _end(workers: list[multiprocessing.process.BaseProcess]) -> None:
    """SIGTERM each worker still running, SIGKILL any left after END_GRACE, and reap them."""
    running = [w for w in workers if w.is_alive()]
    for worker in running:
        with contextlib.suppress(OSError, AttributeError):
            worker.terminate()
    deadline = time.monotonic() + END_GRACE
    for worker in running:
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            with contextlib.suppress(OSError, AttributeError):
                worker.kill()
            worker.join(END_GRACE)


def _broken(future: Future[_Done]) -> bool:
    return not future.done() or future.cancelled() or future.exception() is not None
