"""Scheduled work: the safety-net full rescan and the periodic health record.

APScheduler's defaults would silently skip a run missed during suspend (misfire grace time
1 s); jobs here coalesce missed runs into one and accept being late by up to an interval.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog
from apscheduler.schedulers.background import BackgroundScheduler

if TYPE_CHECKING:
    from vaultd.daemon.lifecycle import Daemon

log = structlog.get_logger(__name__)


def _rescan(daemon: Daemon) -> None:
    if daemon.worker is not None:
        log.info("scheduled rescan")
        daemon.worker.request_full()


def _health(daemon: Daemon) -> None:
    status = daemon.status()
    log.info(
        "health",
        status=status["status"],
        reasons=status["reasons"] or None,
        notes=status["notes"],
        chunks=status["chunks"],
        failed=len(status["failed"]),
        queue_depth=status["queue_depth"],
        lag_p50=status["lag_seconds"]["p50"],
        lag_p95=status["lag_seconds"]["p95"],
        last_reconcile_at=status["last_reconcile_at"],
        rss_mb=status["rss_mb"],
        watch=status["watch"]["mode"],
    )


def _add_jobs(scheduler: Any, daemon: Daemon) -> None:
    schedule = daemon.config.schedule
    for job_id, func, seconds in (
        ("rescan", _rescan, schedule.rescan_seconds),
        ("health", _health, schedule.health_seconds),
    ):
        if seconds > 0:
            scheduler.add_job(
                func,
                "interval",
                seconds=seconds,
                args=[daemon],
                id=job_id,
                replace_existing=True,
                coalesce=True,
                max_instances=1,
                misfire_grace_time=max(1, int(seconds)),
            )


def start_scheduler(daemon: Daemon) -> Any:
    scheduler = BackgroundScheduler(daemon=True)
    _add_jobs(scheduler, daemon)
    scheduler.start()
    return scheduler


def reschedule(scheduler: Any, daemon: Daemon) -> None:
    scheduler.remove_all_jobs()
    _add_jobs(scheduler, daemon)
