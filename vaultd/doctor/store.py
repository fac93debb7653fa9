"""The store check: the data directory outside the vault, on a writable disk, with room."""

from __future__ import annotations

import os
from pathlib import Path

from vaultd.doctor.report import READ_ONLY_REMEDY, Check, quoted
from vaultd.storage.lock import read_only

MiB = 1024 * 1024
GiB = 1024 * MiB

#: Below this much free space on the data directory's disk writes are about to fail: SQLite
#: needs room for its WAL and temporary files, and Chroma for its segments.
FREE_FAIL_BYTES = 100 * MiB
#: Below either of these the disk is nearly full: say so before it is.
FREE_WARN_BYTES = 1 * GiB
FREE_WARN_SHARE = 0.05


def _size(n: float) -> str:
    """A byte count as a person reads it: "512 B", "1.5 GiB"."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def check_free_space(where: Path, free: int, total: int) -> Check:
    """Judge the free space of the data directory's disk (thresholds above)."""
    share = free / total if total > 0 else 0.0
    found = f"{where}: {_size(free)} free of {_size(total)} ({share:.0%})"
    remedy = (
        "free some space on that disk, or stop vaultd, move the data directory to a larger "
        "disk and set [store] path to the new place (nothing is embedded again)"
    )
    if free < FREE_FAIL_BYTES:
        return Check(
            "store", "fail", f"{found}: under {_size(FREE_FAIL_BYTES)}, writes will fail", remedy
        )
    if free < FREE_WARN_BYTES or share < FREE_WARN_SHARE:
        return Check(
            "store",
            "warn",
            f"{found}: under {_size(FREE_WARN_BYTES)} or {FREE_WARN_SHARE:.0%}, nearly full",
            remedy,
        )
    return Check("store", "ok", found)


def check_store_location(data_dir: Path, vault: Path) -> Check:
    """The data directory: outside the vault, a directory on a writable disk, with room."""
    # The config refuses this too, but only as written: a symlink can still lead inside.
    if Path(os.path.realpath(data_dir)).is_relative_to(os.path.realpath(vault)):
        return Check(
            "store",
            "fail",
            f"the data directory {data_dir} is inside the vault {vault}",
            "set [store] path to a directory outside the vault (and outside any synced folder)",
        )
    if data_dir.exists() and not data_dir.is_dir():
        return Check(
            "store", "fail", f"{data_dir} is not a directory", "remove it or set [store] path"
        )
    existing = data_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if read_only(existing):
        return Check(
            "store",
            "fail",
            f"{existing} is on a read-only file system",
            READ_ONLY_REMEDY,
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        return Check(
            "store",
            "fail",
            f"{existing} is not writable by you",
            f"chown -R {os.getuid()} {quoted(existing)}, or set [store] path to a writable "
            "directory",
        )
    try:
        info = os.statvfs(existing)
    except OSError as exc:
        return Check("store", "warn", f"cannot tell the free space of {existing}: {exc}", "")
    checked = check_free_space(
        data_dir, info.f_bavail * info.f_frsize, info.f_blocks * info.f_frsize
    )
    if not data_dir.exists() and checked.status == "ok":
        return Check("store", "ok", f"{checked.message}; created by the first index")
    return checked
