"""Keeping the vault watched: the root's identity checked every tick of the main loop (paused
while there is no vault to read, re-armed and reconciled when it returns or another folder took
its place), and a watcher that died restarted, waiting longer after each failure in a row.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from vaultd.daemon.identity import FileId, check_root
from vaultd.daemon.state import State
from vaultd.daemon.worker import Worker
from vaultd.index.status import IdentityCheck
from vaultd.pipeline.watch import Watcher

log = structlog.get_logger(__name__)

#: A watcher that keeps dying is restarted 1 s after, then 2, 4 ... at most 60 s apart: every
#: restart walks the vault (polling's first snapshot, then the full reconcile), which on a
#: network share that is down only adds load and log lines.
WATCHER_RETRY_FIRST = 1.0
WATCHER_RETRY_MAX = 60.0
#: A watcher that has run this long since its last restart starts over at the first delay.
WATCHER_STABLE = 60.0


@dataclass
class Retry:
    """When to try again after failures in a row: exponential back-off with a cap."""

    first: float = WATCHER_RETRY_FIRST
    cap: float = WATCHER_RETRY_MAX
    stable: float = WATCHER_STABLE
    #: Failures in a row; a death soon after a successful restart continues the row.
    failures: int = 0
    #: When the next attempt is due (time.monotonic), or None when none is waiting.
    due: float | None = None
    #: When the last attempt succeeded.
    since: float | None = None

    def failed(self, now: float) -> float:
        """Record a failure; return the delay before the next attempt (also in `due`)."""
        delay = min(self.first * 2.0 ** min(self.failures, 32), self.cap)
        self.failures += 1
        self.due = now + delay
        return delay

    def succeeded(self, now: float) -> None:
        self.due = None
        self.since = now

    def running(self, now: float) -> None:
        """The thing is up at `now`: after a stable run, the next failure starts a new row."""
        if self.failures and (self.since is None or now - self.since >= self.stable):
            self.failures = 0


@dataclass
class Watching:
    """The vault root's identity and the watcher's restarts, for the daemon's main loop."""

    state: State
    #: The vault root's (device, inode) as taken on: at start-up, or when it came back.
    root_id: FileId | None = None
    #: The root's last identity check, for status.
    last: IdentityCheck | None = None
    retry: Retry = field(default_factory=Retry)

    def check_identity(self, root: Path) -> IdentityCheck:
        """Check the root against the one taken on (the first that is fine is taken on)."""
        return self._publish(check_root(root, self.root_id))

    def _publish(self, check: IdentityCheck) -> IdentityCheck:
        self.last = check
        if check.state == "ok" and self.root_id is None:
            self.root_id = check.found
        return check

    def check_root(self, root: Path, watcher: Watcher, worker: Worker) -> None:
        """Pause while there is no vault to read; re-arm and reconcile when there is one again,
        or when another folder took the root's place."""
        check = check_root(root, self.root_id)
        if check.state not in ("ok", "replaced"):
            reason = check.reason or check.state
            if not worker.paused:
                # Never purge the index because the vault vanished (unmounted, moved, deleted,
                # or a link put in its place).
                log.warning(
                    "no vault to read; pausing until it returns",
                    vault=str(root),
                    problem=check.state,
                    reason=reason,
                )
                worker.paused = True
                watcher.stop()
            if self.state.reasons.get("vault") != reason:
                self.state.degrade("vault", reason)
            # Published after the health it implies: a status that shows this check shows
            # the daemon degraded by it too (status reads the check first).
            self._publish(check)
            return
        if not worker.paused:
            # "ok" and "replaced" degrade nothing: published at once.
            self._publish(check)
            if check.state == "ok":
                return
        if worker.paused:
            log.info("the vault root is back; re-arming", vault=str(root), problem=check.state)
        else:
            # Swapped between two ticks (a mount over it, a folder renamed into its place): the
            # watch still follows the old folder, which sees none of the new one's changes.
            log.warning("the vault root was replaced by another folder; re-arming", vault=str(root))
            watcher.stop()
        self.root_id = check.found
        rearmed = check_root(root, self.root_id)
        retry = self.retry
        try:
            watcher.start()
        except OSError as exc:
            # Back but not watchable yet: check_watcher retries, with back-off.
            delay = retry.failed(time.monotonic())
            log.error("cannot watch the vault; retrying", error=str(exc), retry_in=delay)
            self.state.degrade("watch", f"cannot watch the vault: {exc}")
            watching = False
        else:
            retry.succeeded(time.monotonic())
            watching = True
        worker.paused = False
        worker.request_full()
        # Published just before the health it restores, as a failed check just after the
        # health it implies: a status read while the watch is armed again (seconds on a big
        # vault) shows the check that paused the daemon beside its reason, not "ok".
        self.last = rearmed
        if watching:
            self.state.recover("watch")
        self.state.recover("vault")

    def check_watcher(self, watcher: Watcher, worker: Worker, now: float | None = None) -> None:
        """Restart a watcher that died, waiting longer after each failure in a row."""
        now = time.monotonic() if now is None else now
        retry = self.retry
        if worker.paused or watcher.alive():
            retry.running(now)
            return
        if retry.due is None:
            # It died since the last tick: events were lost, so a full reconcile follows the
            # restart. Not at once: one that keeps dying would walk the vault every tick.
            delay = retry.failed(now)
            watcher.stop()
            log.warning(
                "the file watcher stopped; restarting it and reconciling",
                retry_in=delay,
                failures=retry.failures,
            )
            self.state.degrade("watch", f"the file watcher stopped; restarting it in {delay:g} s")
            return
        if now < retry.due:
            return
        watcher.stop()
        try:
            watcher.start()
        except OSError as exc:
            delay = retry.failed(now)
            log.error(
                "cannot restart the file watcher; retrying",
                error=str(exc),
                retry_in=delay,
                failures=retry.failures,
            )
            self.state.degrade("watch", f"cannot watch the vault: {exc}; retrying in {delay:g} s")
            return
        retry.succeeded(now)
        log.info("the file watcher is running again", mode=watcher.mode)
        # Queued before the health it restores: a daemon healthy again is never idle with
        # what the dead watcher missed still to reconcile.
        worker.request_full()
        self.state.recover("watch")
