"""The crash ledger: the notes in hand, so that one that kills the process is found.

A note that kills the whole process (a native crash, an OOM kill) leaves its row in the
manifest's in-flight table. The next process makes every note found there a suspect (not a
failure: most were only in hand when something else killed the process) and tries suspects
last and one at a time, so the one that really crashes is found, reported, quarantined, and
the rest of the vault is indexed meanwhile (`storage/quarantine.py` keeps the counts).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Sequence

import structlog

from vaultd.errors import StoreError
from vaultd.records import Change, KnownNote
from vaultd.storage.manifest import Manifest

log = structlog.get_logger(__name__)


class Ledger:
    def __init__(self, manifest: Manifest, quarantine_after: int) -> None:
        self.manifest = manifest
        self.quarantine_after = quarantine_after
        #: Notes in flight when the last process died, to be tried one at a time.
        self.suspects: set[str] = set()
        self._recovered = False
        self._retry: set[str] = set()
        self._retry_lock = threading.Lock()

    def retry(self, paths: Iterable[str]) -> None:
        """The user asked for these notes by name: quarantined ones get one more try at the
        start of the next pass (thread-safe; the pass runs on the indexing thread)."""
        with self._retry_lock:
            self._retry.update(paths)

    def start_pass(self) -> None:
        if not self._recovered:
            self._recovered = True
            self._recover_in_flight()
        with self._retry_lock:
            wanted, self._retry = self._retry, set()
        if wanted:
            released = self.manifest.failures.release(sorted(wanted))
            if released:
                log.info("quarantined notes released for one more try", paths=released)

    def _recover_in_flight(self) -> None:
        """Notes the last process died holding: suspects, tried one at a time."""
        outcomes = self.manifest.failures.recover(self.quarantine_after)
        if outcomes:
            log.warning(
                "the last run died while indexing these notes; trying them one at a time",
                paths=[path for path, *_ in outcomes],
            )
        for path, crashes, failed, quarantined in outcomes:
            if quarantined:
                log.error("note quarantined: it crashed the indexer", path=path, crashes=crashes)
            elif failed:
                log.error("note failed: it crashed the indexer alone", path=path, crashes=crashes)
        # Suspects of earlier deaths too: a process that died before trying them alone.
        self.suspects = set(self.manifest.failures.suspects())

    def end_full_pass(self) -> None:
        """Every suspect still on disk was tried in this pass, or is as last recorded."""
        self.suspects.clear()
        self.manifest.failures.clear_suspects()

    def hold(self, changes: Sequence[Change], marked: list[str]) -> None:
        """Mark the notes of these changes in flight (in one commit); `marked` gets them."""
        self.manifest.failures.hold([(c.path, c.size, c.mtime_ns, c.sha256) for c in changes])
        marked.extend(c.path for c in changes)

    def hold_known(self, notes: Sequence[KnownNote]) -> None:
        """Mark these recorded notes in flight (in one commit)."""
        self.manifest.failures.hold([(n.path, n.size, n.mtime_ns, n.sha256) for n in notes])

    def abandon(self, paths: Iterable[str]) -> None:
        """Abandoned (a graceful stop, an error raised), not crashed: these notes did nothing
        wrong, so no attempt is counted against them."""
        with contextlib.suppress(StoreError):
            self.manifest.failures.clear_in_flight(paths)
