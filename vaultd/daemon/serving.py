"""The daemon's side of the API: the reads over its open index (vaultd.api.local), and what only
a running daemon does: its health and status, queueing notes for the worker, and waiting for
them to be indexed. Whichever indexing worker runs now is asked (a dead one is replaced).

Waiting is awaited on the server's event loop: a long poll or an event stream holds no thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from vaultd import __version__
from vaultd.api import operations as o
from vaultd.api.local import LocalService
from vaultd.errors import NotReadyError
from vaultd.layout import vault_id

if TYPE_CHECKING:
    from vaultd.answers import DaemonStatus
    from vaultd.daemon.events import EventStream
    from vaultd.daemon.state import State
    from vaultd.daemon.worker import Worker
    from vaultd.index.open import Index

T = TypeVar("T")

#: How often a long poll looks again though no change was said: a note saved with the content
#: it was indexed with commits nothing, and the watcher's queue empties without a commit.
LOOK_AGAIN = 0.5


class DaemonService(LocalService):
    """`vaultd.api.service.Service`: the local reads and the daemon's own operations."""

    def __init__(
        self,
        index: Index,
        state: State,
        worker: Callable[[], Worker | None],
        status: Callable[[], DaemonStatus],
    ) -> None:
        super().__init__(index)
        self._state = state
        self._worker = worker
        self._status = status
        self._polls = LongPolls(state)

    def health(self, request: o.HealthRequest) -> o.HealthResponse:
        snap = self._state.snapshot()
        reasons = list(snap["reasons"].values())
        return o.HealthResponse(
            status=snap["status"],
            version=__version__,
            vault=str(self.vault),
            vault_id=vault_id(self.vault),
            pid=os.getpid(),
            data_dir=str(self.data_dir),
            **({"reason": "; ".join(reasons)} if reasons else {}),
        )

    def status(self, request: o.StatusRequest) -> o.StatusResponse:
        return o.StatusResponse(self._status())

    def reindex(self, request: o.ReindexRequest) -> o.ReindexResponse:
        worker = self._running_worker()
        if request.paths:
            # Asked for by name: a quarantined note among them gets one more try.
            self.index.indexer.retry(request.paths)
            worker.request_paths(set(request.paths), verify=True)
        else:
            # Asked for by the user: every note is read, whatever its stat says.
            worker.request_full(check=1.0)
        return o.ReindexResponse(accepted=True, paths=request.paths or "all")

    def events(self, request: o.EventsRequest) -> Ended[o.Event]:
        return Ended(self._state.events.stream(), o.Event.model_validate)

    async def until(self, target: str, timeout: float) -> bool:
        worker = self._running_worker()
        if target == "idle":
            return await self._polls.until(target, worker.idle, timeout)
        indexer = self.index.indexer
        return await self._polls.until(target, lambda: indexer.is_current(target), timeout)

    def _running_worker(self) -> Worker:
        worker = self._worker()
        if worker is None:
            raise NotReadyError("the daemon is starting")
        return worker


class LongPolls:
    """Searches waiting for their `wait_for`, as awaits on the running event loop.

    Whether a target is done is looked at in a worker thread (it reads the manifest and may
    hash the note), once for every waiter of that target: after each change the state reports,
    and on a clock shared by every waiter (every LOOK_AGAIN s), so a hundred searches waiting
    for one note cost one look at a time, not a hundred.
    """

    def __init__(self, state: State) -> None:
        self._state = state
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed = asyncio.Event()
        #: The look in hand for each target, shared by everyone waiting for it.
        self._looks: dict[str, asyncio.Future[bool]] = {}

    async def until(self, target: str, done: Callable[[], bool], timeout: float) -> bool:
        loop = self._listening()
        deadline = loop.time() + timeout
        while not await self._look(target, done):
            left = deadline - loop.time()
            if left <= 0:
                return False
            tick = LOOK_AGAIN - loop.time() % LOOK_AGAIN
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, tick)):
                    await changed.wait()
        return True

    def _listening(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop = loop

            def changed() -> None:
                # From the thread that changed the state; a loop closed since has no waiter.
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._wake, loop)

            self._state.listen(changed)
        return loop

    def _wake(self, loop: asyncio.AbstractEventLoop) -> None:
        if loop is self._loop:
            # Looks begun before the change may have missed it: the woken look again afresh.
            self._looks.clear()
            self._changed.set()
            self._changed = asyncio.Event()

    async def _look(self, target: str, done: Callable[[], bool]) -> bool:
        look = self._looks.get(target)
        if look is None:
            look = self._looks[target] = asyncio.ensure_future(asyncio.to_thread(done))
            look.add_done_callback(lambda _: self._forget(target, look))
        # Shielded: a waiter that leaves (its client gone) does not end the others' look.
        return await asyncio.shield(look)

    def _forget(self, target: str, look: asyncio.Future[bool]) -> None:
        if self._looks.get(target) is look:
            del self._looks[target]


class Ended(Generic[T]):
    """An event stream as the API's models, awaited on the server's event loop, which the
    server ends (`end`, when the client hangs up) or closes when it is done with it."""

    def __init__(self, stream: EventStream, shape: Callable[[dict[str, Any]], T]) -> None:
        self._stream, self._shape = stream, shape

    def __aiter__(self) -> Ended[T]:
        return self

    async def __anext__(self) -> T:
        return self._shape(await anext(self._stream))

    def end(self) -> None:
        self._stream.end()

    close = end
