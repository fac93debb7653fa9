"""SIGHUP: what a reload of the configuration applies to a running daemon, and what it leaves
waiting for a restart.

A reload re-reads the configuration whole; an invalid one is logged and the running one kept.
The settings the running parts read live are applied to them: the watcher's debounce, the
worker's model unloading and pacing (`governor.LIVE_SETTINGS`), the scheduler's jobs. What the
index, the model and the watcher were opened with waits for a restart (`restart_only`), and
status lists it until then.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import structlog

from vaultd.config import Config, load_config
from vaultd.daemon.worker import Worker
from vaultd.errors import VaultdError
from vaultd.pipeline.watch import Watcher

log = structlog.get_logger(__name__)

#: Sections the index was opened with (search settings and attachment kinds included).
RESTART_SECTIONS = ("vault", "store", "chunking", "server", "search", "attachments")


class Reloads:
    """Where a daemon's configuration is re-read from, and what the reloads since it started
    changed that waits for a restart."""

    def __init__(
        self,
        started_with: Config,
        *,
        config_file: Path | None = None,
        vault_override: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        #: The configuration the index, the model and the watcher were opened with: a reload
        #: that changes any of it waits for a restart (`restart_only`).
        self.started_with = started_with
        self.config_file = config_file
        self.vault_override = vault_override
        self.env = os.environ if env is None else env
        #: What a reload changed that waits for a restart, for status.
        self.pending: tuple[str, ...] = ()

    def read(self) -> Config | None:
        """The configuration as it is now, with logging set up by it; None, the failure
        logged, when it is invalid (the running configuration is kept)."""
        from vaultd.logs import configure

        try:
            config = load_config(self.config_file, vault=self.vault_override, env=self.env)
            configure(config.log)  # first of what is applied: it is the part that can still fail
        except VaultdError as exc:
            log.error("reload failed; keeping the running configuration", error=str(exc))
            return None
        return config

    def leave_pending(self, config: Config) -> None:
        """Note what `config` changes that waits for a restart; only what this reload changed
        is logged, status lists every change still waiting."""
        pending = restart_only(self.started_with, config)
        news = [part for part in pending if part not in self.pending]
        self.pending = tuple(pending)
        if news:
            log.warning("these sections change only on restart", sections=news)


def apply_live(
    config: Config,
    watcher: Watcher | None,
    worker: Worker | None,
    scheduler: Any,
    rescan: Callable[[], None],
    log_health: Callable[[], None],
) -> None:
    """Hand the running parts the settings they read live."""
    if watcher is not None:
        watcher.settle = config.watch.debounce_seconds
    if worker is not None:
        worker.unload_after = config.schedule.unload_seconds
        worker.governor.configure(config.embedding.cpu_budget, config.embedding.yield_above)
    if scheduler is not None:
        from vaultd.daemon.scheduler import reschedule

        reschedule(scheduler, config.schedule, rescan, log_health)


def restart_only(running: Config, new: Config) -> list[str]:
    """What differs between `running` and `new` that a reload cannot apply: a section the
    index was opened with, an `[embedding]` setting the model was loaded with (all but
    `governor.LIVE_SETTINGS`), the watcher's backend."""
    from vaultd.daemon.governor import LIVE_SETTINGS

    found = [s for s in RESTART_SECTIONS if getattr(new, s) != getattr(running, s)]
    found += [
        f"embedding {f.name}"
        for f in fields(new.embedding)
        if f.name not in LIVE_SETTINGS
        and getattr(new.embedding, f.name) != getattr(running.embedding, f.name)
    ]
    if new.watch.backend != running.watch.backend:
        found.append("watch backend")
    return found
