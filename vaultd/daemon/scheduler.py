"""Scheduled work: the safety-net full rescan and the periodic health record.

APScheduler's defaults would silently skip a run missed during suspend (misfire grace time
1 s); jobs here coalesce missed runs into one and accept being late by up to an interval.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from vaultd.config import ScheduleSection


def _add_jobs(
    scheduler: Any,
    schedule: ScheduleSection,
    rescan: Callable[[], None],
    health: Callable[[], None],
) -> None:
    for job_id, func, seconds in (
        ("rescan", rescan, schedule.rescan_seconds),
        ("health", health, schedule.health_seconds),
    ):
        if seconds > 0:
            scheduler.add_job(
                func,
                "interval",
                seconds=seconds,
                id=job_id,
                replace_existing=True,
                coalesce=True,
                max_instances=1,
                misfire_grace_time=max(1, int(seconds)),
            )


def start_scheduler(
    schedule: ScheduleSection, rescan: Callable[[], None], health: Callable[[], None]
) -> Any:
    """Run `rescan` and `health` at the intervals `schedule` gives (0: never)."""
    scheduler = BackgroundScheduler(daemon=True)
    _add_jobs(scheduler, schedule, rescan, health)
    scheduler.start()
    return scheduler


def reschedule(
    scheduler: Any,
    schedule: ScheduleSection,
    rescan: Callable[[], None],
    health: Callable[[], None],
) -> None:
    scheduler.remove_all_jobs()
    _add_jobs(scheduler, schedule, rescan, health)
