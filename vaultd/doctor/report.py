"""What every check of `vaultd doctor` reports: a `Check` (a status, a one-line finding and,
unless it is ok, a concrete remedy), the `Report` of them all, and the wording that findings
and remedies of several concerns share."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Status = Literal["ok", "warn", "fail"]

#: Exit codes of `vaultd doctor`: warnings alone do not fail.
EXIT_HEALTHY = 0
EXIT_FAILED = 1

#: How many paths a finding names before it says "and N more".
SHOW = 3


@dataclass(frozen=True, slots=True)
class Check:
    """One finding: what was checked, how it went and what to do about it."""

    name: str
    status: Status
    message: str
    remedy: str = ""

    def as_json(self) -> dict[str, str]:
        return {
            "name": self.name,
            "status": self.status,
            "message": self.message,
            "remedy": self.remedy,
        }


@dataclass(frozen=True, slots=True)
class Report:
    """Every check's finding, in ORDER, and what they add up to: healthy unless one failed."""

    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    @property
    def exit_code(self) -> int:
        return EXIT_HEALTHY if self.ok else EXIT_FAILED

    def by_name(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def as_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [c.as_json() for c in self.checks]}


def not_checked(name: str, why: str, first: str) -> Check:
    """A check skipped because another failed: a warning sending the user to that one."""
    return Check(name, "warn", f"not checked: {why}", f"fix the {first} check first")


def quoted(path: Path | str) -> str:
    """A path as a shell command in a remedy needs it."""
    return shlex.quote(str(path))


def first_few(items: Sequence[str]) -> str:
    """The first SHOW items, and how many more there are."""
    shown = ", ".join(items[:SHOW])
    return shown + (f" and {len(items) - SHOW} more" if len(items) > SHOW else "")


def reinstall(package: str) -> str:
    """The pip command that puts an installed package back as it shipped."""
    from importlib import metadata

    try:
        pin = f"=={metadata.version(package)}"
    except metadata.PackageNotFoundError:
        pin = ""
    return f"{quoted(sys.executable)} -m pip install --force-reinstall --no-deps {package}{pin}"


#: For a data directory on a read-only disk, which neither chmod nor chown can fix.
READ_ONLY_REMEDY = (
    "set [store] path to a directory on a writable disk: the index is written to all the time, "
    "and a read-only mount stays read-only whatever its owner and mode"
)
