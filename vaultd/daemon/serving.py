"""The daemon's side of the socket API: `vaultd.api.service.Service` over an open index, the
live state and whichever indexing worker runs now (a dead one is replaced)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from vaultd.errors import NotReadyError
from vaultd.index import browse
from vaultd.index.export import export_records
from vaultd.index.mentions import unlinked_mentions
from vaultd.index.names import note_named
from vaultd.index.notes import note_view
from vaultd.index.related import checked_how

if TYPE_CHECKING:
    from vaultd.daemon.state import State
    from vaultd.daemon.worker import Worker
    from vaultd.index.open import Index
    from vaultd.query import Filters, Mode
    from vaultd.records import Hit


class DaemonService:
    def __init__(
        self,
        index: Index,
        state: State,
        worker: Callable[[], Worker | None],
        status: Callable[[], dict[str, Any]],
    ) -> None:
        self.index = index
        self.vault = index.vault
        self.data_dir = index.data_dir
        self._state = state
        self._worker = worker
        self._status = status

    def health(self) -> tuple[str, list[str]]:
        snap = self._state.snapshot()
        return str(snap["status"]), list(snap["reasons"].values())

    def status(self) -> dict[str, Any]:
        return self._status()

    def search(
        self,
        query: str,
        *,
        k: int,
        mode: Mode,
        filters: Filters,
        per_note: int | None,
        merge: bool | None,
        snippets: bool = False,
    ) -> list[Hit]:
        return self.index.searcher.search(
            query,
            k=k,
            mode=mode,
            filters=filters,
            per_note=per_note,
            merge=merge,
            settings=self.index.config.search,
            snippets=snippets,
        )

    def find_note(self, name: str) -> str | None:
        return note_named(self.index.manifest, name)

    def note(self, path: str) -> dict[str, Any] | None:
        return note_view(self.index.manifest, path)

    def related(
        self,
        path: str,
        *,
        k: int,
        lines: tuple[int, int] | None,
        exclude_linked: bool,
        filters: Filters,
        how: str,
    ) -> list[dict[str, Any]] | None:
        if self.index.manifest.note_row(path) is None:
            return None
        found = self.index.related.related(
            path,
            k,
            lines=lines,
            exclude_linked=exclude_linked,
            allowed=self.index.searcher.select(filters),
            how=checked_how(how),
        )
        return [r.as_json() for r in found]

    def mentions(self, path: str, k: int) -> list[dict[str, Any]] | None:
        found = unlinked_mentions(self.index.manifest, path, k)
        return None if found is None else [m.as_json() for m in found]

    def outline(self, path: str) -> list[dict[str, Any]] | None:
        if self.index.manifest.note_row(path) is None:
            return None
        indexer = self.index.indexer
        return [h.as_json() for h in browse.outline(indexer.discovery, path, indexer.max_bytes)]

    def tags(self, prefix: str) -> list[dict[str, Any]]:
        return browse.tags(self.index.manifest, prefix)

    def recent(self, k: int, since_ns: int | None) -> list[dict[str, Any]]:
        return browse.recent(self.index.manifest, k, since_ns)

    def read_note(self, path: str) -> bytes:
        data, _ = self.index.indexer.discovery.read_note(path)
        return data

    def reindex(self, paths: Sequence[str]) -> None:
        worker = self._running_worker()
        if paths:
            # Asked for by name: a quarantined note among them gets one more try.
            self.index.indexer.retry(paths)
            worker.request_paths(set(paths), verify=True)
        else:
            # Asked for by the user: every note is read, whatever its stat says.
            worker.request_full(check=1.0)

    def export(self, with_vectors: bool) -> Iterator[dict[str, Any]]:
        return export_records(self.index.store, with_vectors=with_vectors)

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
