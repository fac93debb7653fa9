"""The daemon's side of the API: the reads over its open index (vaultd.api.local), and what only
a running daemon does: its health and status, queueing notes for the worker, and waiting for
them to be indexed. Whichever indexing worker runs now is asked (a dead one is replaced)."""

from __future__ import annotations

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

    def wait(self, target: str, timeout: float) -> bool:
        worker = self._running_worker()
        if target == "idle":
            return self._state.wait(worker.idle, timeout)
        indexer = self.index.indexer
        return self._state.wait(lambda: indexer.is_current(target), timeout)

    def _running_worker(self) -> Worker:
        worker = self._worker()
        if worker is None:
            raise NotReadyError("the daemon is starting")
        return worker


class Ended(Generic[T]):
    """An event stream as the API's models, which the server may end from another thread
    (`end`, when the client hangs up) as well as close from its own."""

    def __init__(self, stream: EventStream, shape: Callable[[dict[str, Any]], T]) -> None:
        self._stream, self._shape = stream, shape

    def __iter__(self) -> Ended[T]:
        return self

    def __next__(self) -> T:
        return self._shape(next(self._stream))

    def end(self) -> None:
        self._stream.end()

    close = end
