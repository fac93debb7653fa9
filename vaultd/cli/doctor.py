"""`vaultd doctor`'s report for a person: one line per check of `vaultd.doctor`, its remedy
under it. The command (`commands.doctor`) prints this or the report's JSON and exits with the
report's code: 0 when nothing failed, 1 when a check did."""

from __future__ import annotations

from collections.abc import Callable

from vaultd.doctor.checks import ORDER
from vaultd.doctor.report import Report, Status


def render_text(report: Report, style: Callable[[str, Status], str] | None = None) -> str:
    """One line per check (status, name, finding), the remedy indented under it."""
    paint = style or (lambda text, status: text)
    width = max(len(name) for name in ORDER)
    lines = []
    said = ""
    for check in report.checks:
        label = {"ok": "ok", "warn": "WARN", "fail": "FAIL"}[check.status]
        lines.append(
            f"{paint(f'{label:<4}', check.status)}  {check.name:<{width}}  {check.message}"
        )
        # Checks skipped for one cause share its remedy; once is enough.
        if check.remedy and check.status != "ok" and check.remedy != said:
            lines.append(f"{'':<{width + 8}}fix: {check.remedy}")
        said = check.remedy
    warned = sum(1 for c in report.checks if c.status == "warn")
    failed = sum(1 for c in report.checks if c.status == "fail")
    lines.append(
        f"{len(report.checks)} checks: {len(report.checks) - warned - failed} ok, "
        f"{warned} warning{'' if warned == 1 else 's'}, {failed} failed"
    )
    return "\n".join(lines)
