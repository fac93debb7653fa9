"""The privacy check: the data directory and the log, which hold the vault's text, are the
user's own and closed to everyone else."""

from __future__ import annotations

import os
from pathlib import Path

from vaultd.doctor.report import READ_ONLY_REMEDY, SHOW, Check, quoted


def check_privacy(data_dir: Path, log_file: str) -> Check:
    """The data directory and the log hold the vault's text: nobody else may read or write
    them. vaultd creates them owner-only and tightens what it finds open when it opens the
    index; doctor only reports."""
    from vaultd.layout import loose

    untrusted = _untrusted_data_dir(data_dir)
    if untrusted is not None:
        return untrusted
    roots = [data_dir] + ([Path(os.path.expanduser(log_file))] if log_file else [])
    found = loose(*roots)
    if not found:
        checked = " and the log" if log_file else ""
        return Check("privacy", "ok", f"the data directory{checked}: owner-only")
    named = ", ".join(entry.describe() for entry in found[:SHOW])
    more = f" and {len(found) - SHOW} more" if len(found) > SHOW else ""
    fixes = [
        quoted(root)
        for root in roots
        if any(e.path == root or e.path.is_relative_to(root) for e in found)
    ]
    from vaultd.storage.lock import read_only

    if read_only(data_dir):
        remedy = (
            "the disk is mounted read-only, so no mode can change there: "
            + READ_ONLY_REMEDY
            + " (vaultd creates the new one owner-only)"
        )
        return Check("privacy", "fail", f"other users can read the index: {named}{more}", remedy)
    return Check(
        "privacy",
        "fail",
        f"other users can read or write the index of your notes: {named}{more}",
        f"chmod -R go-rwx {' '.join(fixes)} (vaultd also does this when it next opens the index)",
    )


def _untrusted_data_dir(data_dir: Path) -> Check | None:
    """vaultd's own refusal (vaultd.trust): a data directory another user owns or may write,
    or one holding their files. chmod cannot fix what is theirs, so doctor never suggests it."""
    from vaultd.trust import distrust, foreign

    problem = distrust(data_dir, tighten=True)
    planted = foreign(data_dir) if problem is None and data_dir.is_dir() else []
    if problem is None and not planted:
        return None
    if problem is not None:
        found = f"{problem.describe()}: another user could read the index or plant files in it"
    else:
        names = ", ".join(p.describe() for p in planted[:SHOW])
        more = f" and {len(planted) - SHOW} more" if len(planted) > SHOW else ""
        found = f"the data directory holds another user's files: {names}{more}"
    return Check(
        "privacy",
        "fail",
        f"{found}; vaultd refuses it (exit 77)",
        "set [store] path to a directory of your own (vaultd creates it private); chmod cannot "
        "change what another user owns: ask them (or root) to remove it",
    )
