"""The daemon (`vaultd run`): the composition root for a long-running index.

Start-up, in order: open the index (config already validated, data-directory lock, store,
model; a reader that holds the lock for a moment is waited for), start watching the vault
BEFORE the first reconcile so nothing written during start-up is lost, start the socket
server, the single indexing worker and the scheduler, then tell the service manager we are
ready. Shutdown runs the same list in reverse inside `finally`.

Signal handlers only set flags; the main thread acts on them. The first SIGTERM or SIGINT asks
for a graceful stop (the batch in flight finishes, the rest is abandoned and picked up by the
next start), a second SIGINT forces an immediate exit. SIGHUP reloads the configuration.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import fields
from pathlib import Path
from typing import Any

import structlog

from vaultd.answers import DaemonStatus, DaemonStore, Lag, Skipped
from vaultd.config import Config
from vaultd.daemon.identity import check_manifest
from vaultd.daemon.notify import Notifier
from vaultd.daemon.reloading import Reloads, apply_live
from vaultd.daemon.serving import DaemonService
from vaultd.daemon.signals import Signals
from vaultd.daemon.state import State
from vaultd.daemon.watching import Watching
from vaultd.daemon.worker import (
    BULK_BATCH_CHUNKS,
    INTERACTIVE_RUN_TOKENS,
    Worker,
    check_share,
)
from vaultd.errors import LockedError, ManifestLostError, ReaderHeldError, VaultdError
from vaultd.index.open import Index, open_index
from vaultd.index.packages import watch_rule
from vaultd.index.passes import Pacing
from vaultd.index.status import IdentityCheck, index_status
from vaultd.logs import iso, ms
from vaultd.pipeline.watch import Watcher
from vaultd.progress import PHASE_NAMES, Snapshot, pass_display
from vaultd.storage.lock import READERS, Holder, LockHolder
from vaultd.storage.probe import last_moved_aside

log = structlog.get_logger(__name__)

#: How long a graceful stop may wait for the batch in flight (systemd's default is 90 s).
STOP_TIMEOUT = 20.0
#: How often the main loop wakes to check signals, the vault root and the watchdog.
TICK = 0.25
#: How long a start waits for a reader that holds the data directory's lock (a query answered
#: from the index, `vaultd status`, `doctor`, the MCP bridge with no daemon). One holds it for a
#: second or two: the model and the store load, one call runs. Sixty is room for a slow query
#: on a busy machine (a login, when everything starts at once) and for a few of them in a row,
#: while a reader that is wedged ends the start within a minute, with an exit the service
#: manager retries (ReaderHeldError).
READER_PATIENCE = 60.0
#: How often a start that waits for a reader tries the lock again: a script's queries leave
#: gaps of about a second between them, and the daemon must get in through one.
READER_POLL = 0.1
#: systemd's DefaultTimeoutStartSec: what a start is allowed when nothing held it up.
START_TIMEOUT = 90.0


class Daemon:
    """Runs one vault's index until asked to stop."""

    def __init__(
        self,
        config: Config,
        *,
        config_file: Path | None = None,
        vault_override: Path | None = None,
        env: Mapping[str, str] | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.config = config
        self.env = os.environ if env is None else env
        self.reloads = Reloads(
            config, config_file=config_file, vault_override=vault_override, env=self.env
        )
        self.notifier = notifier or Notifier(self.env)
        self.state = State()
        self.signals = Signals()
        self.index: Index | None = None
        self.watcher: Watcher | None = None
        self.worker: Worker | None = None
        self.scheduler: Any = None
        self.server: Any = None
        self.watching = Watching(self.state)
        #: The manifest's last identity check, for status.
        self._manifest_check: IdentityCheck | None = None
        #: Why the daemon stopped on its own, raised once everything is closed.
        self._fatal: VaultdError | None = None

    def request_stop(self) -> None:
        self.signals.stop()

    # -- lifecycle -----------------------------------------------------------------------------

    def run(self) -> int:
        from vaultd.api.client import check_socket
        from vaultd.api.server import check_socket_path, daemon_socket_path
        from vaultd.storage.lock import check_data_dir_files

        # Before anything is created: a data directory (the socket's home, without a runtime
        # directory) another user owns or has put files in, and a socket path another user
        # could swap on the way to it (a symlink or directory above the socket's own).
        data_dir = self.config.require_store()
        check_data_dir_files(data_dir)
        path = daemon_socket_path(self.config, self.env)
        if path.parent != data_dir:  # the data directory's own check covers it, above
            check_socket(path)
        check_socket_path(self.config, self.env)
        with self.signals.installed(), ExitStack() as stack:
            opened_at = time.time()
            opened = self._open_index(stack)
            if opened is None:
                log.info("stopped while waiting for the data directory")
                return 0
            index = self.index = opened
            # Damage a pass would meet only when it reaches the page ends the start now, before
            # anything is served from the file (ManifestDamagedError, exit 78).
            index.manifest.check()
            moved = last_moved_aside(index.data_dir)
            if moved is not None and float(moved.get("at", 0)) >= opened_at:
                self.state.degrade(
                    "store",
                    f"the vector store was damaged ({moved.get('problem')}) and moved aside to "
                    f"{moved.get('moved_to')}; rebuilding it from the manifest (nothing is "
                    "embedded again); vector search may miss passages until that is done",
                )
            # Before the watch is armed: a root swapped from here on is a change to notice.
            self.watching.check_identity(index.vault)
            self._manifest_check = check_manifest(index.manifest)
            discovery = index.indexer.discovery
            watcher = Watcher(
                index.vault,
                settle=self.config.watch.debounce_seconds,
                backend=self.config.watch.backend,
                # Package manifests too, where source files are indexed (vaultd.index.packages).
                is_ignored=watch_rule(discovery),
            )
            # Watch first: whatever is written while the first reconcile runs is seen.
            watcher.start()
            stack.callback(watcher.stop)
            self.watcher = watcher
            if watcher.fallback_reason:
                log.warning("watching by polling", reason=watcher.fallback_reason)
            worker = Worker(index, watcher, self.state, display=pass_display())
            self.worker = worker
            self.server = self._start_server(stack)
            worker.start()
            stack.callback(self._stop_worker)
            self.scheduler = self._start_scheduler(stack)
            self.notifier.ready(f"indexing {index.vault}")
            log.info(
                "started",
                vault=str(index.vault),
                data=str(index.data_dir),
                watch=watcher.mode,
                socket=str(self.server.path),
                pid=os.getpid(),
            )
            self._main_loop()
            self.notifier.stopping()
            log.info("stopping")
        log.info("stopped")
        if self._fatal is not None:
            raise self._fatal
        return 0

    def _open_index(self, stack: ExitStack) -> Index | None:
        """The index, opened into `stack` once its lock is free of readers; None when a stop
        is asked for while waiting.

        A daemon started while a reader holds the lock (a service started at login while a
        script or an AI tool queries the index) waits for it rather than exit 75, which the
        service manager does not restart on. Anything else that holds the lock (another
        daemon, an index run, a process stopped with SIGSTOP) is refused at once.
        """
        deadline = time.monotonic() + READER_PATIENCE
        waiting_for: int | None = None
        while True:
            try:
                return stack.enter_context(
                    open_index(
                        self.config,
                        self.env,
                        holder=Holder.DAEMON,
                        pacing=Pacing(batch_chunks=BULK_BATCH_CHUNKS),
                        run_tokens=INTERACTIVE_RUN_TOKENS,
                        # Each note indexed, failed or deleted, on the event stream.
                        on_note=self.state.events.publish,
                    )
                )
            except LockedError as exc:
                if exc.holder not in READERS:
                    raise
                holder = LockHolder(exc.pid, Holder.named(exc.holder))
                if time.monotonic() >= deadline:
                    raise ReaderHeldError(
                        f"{holder.describe()} has held {self.config.require_store()} for "
                        f"{READER_PATIENCE:.0f} s while this daemon waited to start: see what "
                        "it is doing, or stop it; a service manager starts the daemon again",
                        pid=exc.pid,
                        holder=exc.holder,
                    ) from None
                if waiting_for is None:
                    log.info(
                        "waiting for a reader to let go of the data directory",
                        pid=exc.pid,
                        holder=exc.holder,
                        limit_s=READER_PATIENCE,
                    )
                if exc.pid != waiting_for:
                    waiting_for = exc.pid
                    # The service manager's start timeout runs meanwhile: extended by what is
                    # left of the wait, and a whole start's worth after it.
                    left = max(0.0, deadline - time.monotonic())
                    self.notifier.held_up(
                        f"waiting for {holder.describe()} to let go of the index",
                        left + START_TIMEOUT,
                    )
            if self.signals.sleep(READER_POLL):
                return None

    def _start_server(self, stack: ExitStack) -> Any:
        from vaultd.api.server import start_server

        assert self.index is not None
        service = DaemonService(self.index, self.state, lambda: self.worker, self.status)
        server = start_server(service, self.config, self.env)
        stack.callback(server.close)
        # Before the server closes: its event streams end first.
        stack.callback(self.state.events.close)
        return server

    def _start_scheduler(self, stack: ExitStack) -> Any:
        from vaultd.daemon.scheduler import start_scheduler

        scheduler = start_scheduler(self.config.schedule, self._rescan, self._log_health)
        stack.callback(scheduler.shutdown)
        return scheduler

    def _rescan(self) -> None:
        """The scheduled safety net: a full pass catches whatever events were missed, and
        reads a share of the vault whatever the stats say (`worker.CHECK_CYCLE`)."""
        if self.worker is not None:
            log.info("scheduled rescan")
            self.worker.request_full(check=check_share(self.config.schedule.rescan_seconds))

    def _log_health(self) -> None:
        status = self.status()
        log.info(
            "health",
            status=status.status,
            reasons=status.reasons or None,
            notes=status.notes,
            chunks=status.chunks,
            failed=len(status.failed),
            queue_depth=status.queue_depth,
            lag_p50_ms=ms(status.lag_seconds.p50),
            lag_p95_ms=ms(status.lag_seconds.p95),
            last_reconcile_at=iso(status.last_reconcile_at),
            rss_mb=status.rss_mb,
            watch=status.watch["mode"],
        )

    def _stop_worker(self) -> None:
        if self.worker is not None:
            self.worker.end(STOP_TIMEOUT)

    def _main_loop(self) -> None:
        assert self.index is not None and self.watcher is not None and self.worker is not None
        last_ping = 0.0
        last_status = ""
        root = self.index.vault
        while not self.signals.sleep(TICK):
            if self._check_manifest():
                continue
            summary = self._status_line()
            if summary != last_status:
                self.notifier.status(summary)
                last_status = summary
            if self.signals.reload_asked():
                self.reload()
            self.watching.check_root(root, self.watcher, self.worker)
            self.watching.check_watcher(self.watcher, self.worker)
            self._check_worker()
            # Checked after the repairs above, so a part that died since the last tick and
            # was not brought back is never covered by a ping.
            interval = self.notifier.watchdog_interval
            if interval and time.monotonic() - last_ping >= interval and self.alive():
                self.notifier.watchdog()
                last_ping = time.monotonic()

    def _status_line(self) -> str:
        """The one line `systemctl status` shows."""
        assert self.worker is not None
        snap = self.state.snapshot()
        queued = self.worker.queue_depth()
        doing = snap["indexing"] or "idle"
        progress = self.worker.progress.snapshot() if snap["state"] == "indexing" else None
        if progress is not None and progress.total:
            # The phase, and its share in steps of 5%: a message a step, not one a tick.
            share = 5 * int(20 * progress.done / progress.total)
            doing = f"indexing ({PHASE_NAMES.get(progress.phase, progress.phase)} {share}%)"
        text = f"{snap['status']}; {doing}; {queued} queued"
        if snap["reasons"]:
            text += "; " + "; ".join(snap["reasons"].values())
        return text

    def alive(self) -> bool:
        """Liveness for the service manager's watchdog: the worker and the watcher run.

        A watcher stopped on purpose while the vault root is missing counts as running; one
        that died does not, even while a restart is pending, so a watcher that cannot be
        brought back within WatchdogSec gets the whole service restarted.
        """
        worker_ok = self.worker is not None and self.worker.is_alive()
        watcher_ok = self.watcher is not None and (
            self.watcher.alive() or bool(self.worker and self.worker.paused)
        )
        return worker_ok and watcher_ok

    def _check_manifest(self) -> bool:
        """Whether vaultd.db is lost (deleted or replaced while open): then stop, and say why.

        Reopening would not bring back what was written into the lost file since, and a file
        put in its place may be a backup or another index: a person decides, so the exit code
        is one the service manager does not restart on.
        """
        assert self.index is not None
        damaged = self.index.manifest.damaged
        if damaged is not None:
            # Met by a pass or a query: every pass would meet it again (a retry every few
            # seconds, for ever), and only a person can say what replaces the file.
            self.state.degrade("manifest", f"{damaged.manifest} is damaged ({damaged.problem})")
            log.error(
                "the index's database is damaged; stopping",
                path=damaged.manifest,
                problem=damaged.problem,
            )
            self._fatal = damaged
            self.signals.stop()
            return True
        check = check_manifest(self.index.manifest)
        if check.state == "ok":
            self._manifest_check = check
            if "manifest" in self.state.reasons:
                self.state.recover("manifest")
            return False
        reason = check.reason or check.state
        if self.state.reasons.get("manifest") != reason:
            self.state.degrade("manifest", reason)
        # After the health it implies, as Watching.check_root publishes the root's.
        self._manifest_check = check
        if check.state == "unreachable":
            return False
        path = str(self.index.manifest.path)
        log.error("the index's database is lost; stopping", path=path, problem=check.state)
        self.notifier.status(self._status_line())
        self._fatal = ManifestLostError(path, reason)
        self.signals.stop()
        return True

    def _check_worker(self) -> None:
        """The indexing worker is never restarted in place: say so, and let pings stop."""
        assert self.worker is not None
        if self.worker.is_alive() or self.signals.stopping or "worker" in self.state.reasons:
            return
        # Only a BaseException (SystemExit, say) gets past the worker's own handlers, and a
        # thread ends on SystemExit without a word.
        log.error("the indexing worker stopped; nothing is indexed until vaultd restarts")
        self.state.degrade(
            "worker", "the indexing worker stopped; nothing is indexed until vaultd restarts"
        )

    def reload(self) -> None:
        """SIGHUP: re-read the configuration and apply what can be applied live
        (`vaultd.daemon.reloading`); an invalid one is logged and the old one kept."""
        self.notifier.reloading()
        config = self.reloads.read()
        if config is None:
            self.notifier.ready("reload failed; running the previous configuration")
            return
        self.reloads.leave_pending(config)
        self.config = config
        apply_live(
            config, self.watcher, self.worker, self.scheduler, self._rescan, self._log_health
        )
        log.info("configuration reloaded")
        self.notifier.ready("configuration reloaded")

    # -- what the socket server and the scheduler call -----------------------------------------

    def _health(self) -> tuple[dict[str, Any], Snapshot | None, dict[str, Any]]:
        """The identity checks, the pass's progress and the health, as one answer shows them.

        A failed check is published after the health it implies and one back to "ok" before
        the health it restores; a pass is named before its progress, which is cleared before
        its name. So the checks and the progress are read before the health and looked at
        again after it: one that changed meanwhile (the root back, the pass done) is read
        again with the health, never shown beside a health it does not belong with.
        """
        assert self.worker is not None
        while True:
            found = (self.watching.last, self._manifest_check, self.worker.progress.snapshot())
            snapshot = self.state.snapshot()
            again = (self.watching.last, self._manifest_check, self.worker.progress.snapshot())
            if _kinds(again) == _kinds(found):
                break
        root, manifest, progress = found
        identity = {
            name: check.as_json()
            for name, check in (("vault_root", root), ("manifest", manifest))
            if check is not None
        }
        return identity, progress, snapshot

    def status(self) -> DaemonStatus:
        from vaultd import __version__

        assert self.index is not None and self.worker is not None and self.watcher is not None
        identity, progress, snapshot = self._health()
        index = index_status(self.index)
        return DaemonStatus(
            **{f.name: getattr(index, f.name) for f in fields(index) if f.name != "store"},
            version=__version__,
            status=snapshot["status"],
            state=snapshot["state"],
            reasons=snapshot["reasons"],
            indexing=snapshot["indexing"],
            last_reconcile=snapshot["last_reconcile"],
            last_reconcile_at=snapshot["last_reconcile_at"],
            lag_seconds=Lag(**snapshot["lag_seconds"]),
            queue_depth=self.worker.queue_depth(),
            governor=self.worker.governor.status(),
            restart_pending=self.reloads.pending,
            progress=None if progress is None else progress.as_json(),
            watch={"mode": self.watcher.mode, "fallback_reason": self.watcher.fallback_reason},
            embedded_total=self.index.embedder.embedded,
            notes_read_total=self.index.indexer.reads,
            store=DaemonStore(
                index.store.data_dir,
                index.store.chroma,
                moved_aside=last_moved_aside(self.index.data_dir),
                loaded=self.index.store.loaded,
            ),
            model_loaded=self.index.embedder.loaded,
            rss_mb=_rss_mb(),
            identity=identity,
            skipped=tuple(
                Skipped(path, reason) for path, reason in self.index.indexer.discovery.reported
            ),
            events={"readers": self.state.events.readers, "dropped": self.state.events.dropped},
        )


def _kinds(
    found: tuple[IdentityCheck | None, IdentityCheck | None, Snapshot | None],
) -> tuple[str | None, str | None, bool]:
    """What of the identity checks and the progress a health must agree with: each check's
    state, and whether a pass shows progress."""
    root, manifest, progress = found
    return (
        None if root is None else root.state,
        None if manifest is None else manifest.state,
        progress is None,
    )


def _rss_mb() -> float | None:
    try:
        with open("/proc/self/statm") as handle:
            pages = int(handle.read().split()[1])
        return round(pages * os.sysconf("SC_PAGE_SIZE") / 1048576, 1)
    except (OSError, ValueError, IndexError):
        import resource

        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
