"""The inotify check (Linux): the kernel's per-user limits against the watches the vault
needs, or why the running daemon fell back to polling."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vaultd.doctor.report import Check

#: Every watched folder costs one inotify watch, from a budget shared by all of the user's
#: programs (editors, sync clients); a vault may use at most this share of it.
INOTIFY_SHARE = 0.5
#: What to raise max_user_watches to, at least (the value the watcher's own message suggests).
INOTIFY_SUGGESTED_WATCHES = 524288
#: Each daemon needs one inotify instance; fewer than this per user leaves little for others.
INOTIFY_MIN_INSTANCES = 16
INOTIFY_SUGGESTED_INSTANCES = 128
INOTIFY_PROC = Path("/proc/sys/fs/inotify")


@dataclass(frozen=True, slots=True)
class InotifyLimits:
    """The kernel's per-user budget of inotify watches and instances."""

    max_user_watches: int
    max_user_instances: int


def read_inotify_limits() -> InotifyLimits | None:
    """The kernel's per-user inotify limits; None where there are none to read (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return InotifyLimits(
            max_user_watches=int((INOTIFY_PROC / "max_user_watches").read_text().strip()),
            max_user_instances=int((INOTIFY_PROC / "max_user_instances").read_text().strip()),
        )
    except (OSError, ValueError):
        return None


def _sysctl(name: str, value: int) -> str:
    return (
        f"sudo sysctl fs.inotify.{name}={value}; to keep it after a reboot: echo "
        f"fs.inotify.{name}={value} | sudo tee /etc/sysctl.d/60-vaultd.conf"
    )


def suggested_watches(folders: int) -> int:
    """A max_user_watches that leaves the vault well under INOTIFY_SHARE of the budget."""
    value = INOTIFY_SUGGESTED_WATCHES
    while folders > value * INOTIFY_SHARE / 2:
        value *= 2
    return value


def check_inotify(
    limits: InotifyLimits | None,
    folders: int | None,
    *,
    linux: bool,
    backend: str = "auto",
    daemon_watch: Mapping[str, Any] | None = None,
) -> Check:
    if backend == "polling":
        return Check("inotify", "ok", '[watch] backend = "polling": inotify is not used')
    if not linux:
        return Check("inotify", "ok", "not Linux: no inotify limits")
    if limits is None:
        return Check(
            "inotify",
            "warn",
            f"cannot read the inotify limits under {INOTIFY_PROC}",
            "check `sysctl fs.inotify.max_user_watches fs.inotify.max_user_instances`",
        )
    found = (
        f"max_user_watches={limits.max_user_watches}, "
        f"max_user_instances={limits.max_user_instances}"
    )
    if (
        daemon_watch
        and daemon_watch.get("mode") == "polling"
        and daemon_watch.get("fallback_reason")
    ):
        value = suggested_watches(folders or 0)
        return Check(
            "inotify",
            "warn",
            f"{found}; the daemon polls: {daemon_watch['fallback_reason']}",
            _sysctl("max_user_watches", value) + "; then restart the daemon",
        )
    if folders is not None and folders > limits.max_user_watches * INOTIFY_SHARE:
        value = suggested_watches(folders)
        fate = (
            "native watching fails and the daemon falls back to polling"
            if folders > limits.max_user_watches
            else "little is left for your other programs, which share the budget"
        )
        return Check(
            "inotify",
            "warn",
            f"{found}; the vault has {folders} folders, each costing a watch: {fate}",
            _sysctl("max_user_watches", value),
        )
    if limits.max_user_instances < INOTIFY_MIN_INSTANCES:
        return Check(
            "inotify",
            "warn",
            f"{found}; under {INOTIFY_MIN_INSTANCES} instances, a daemon may not get one",
            _sysctl("max_user_instances", INOTIFY_SUGGESTED_INSTANCES),
        )
    used = f"; the vault needs {folders} watches" if folders is not None else ""
    return Check("inotify", "ok", f"{found}{used}")
