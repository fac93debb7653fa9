"""The vault check: a readable folder, its files counted by kind, the unreadable ones named."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from vaultd.config import Config
from vaultd.doctor.report import Check, first_few, quoted
from vaultd.errors import VaultdError

if TYPE_CHECKING:
    from vaultd.pipeline.discover import Discovery


def count_folders(root: Path) -> int:
    """Folders under `root`, itself included, as a recursive inotify watch sees them: all of
    them, ignored ones (`.git/`, `.obsidian/`) too, symlinks not followed."""
    return sum(1 for _ in os.walk(root))


def check_vault(config: Config) -> tuple[Check, int | None]:
    """The vault and its notes. Returns the number of folders, when the vault can be walked."""
    from vaultd.pipeline.discover import Discovery, IgnoreRules

    path = config.vault.path
    if path is None:
        return (
            Check(
                "vault",
                "fail",
                "no vault configured",
                'pass --vault DIR, or set [vault] path = "/path/to/vault" in the config file',
            ),
            None,
        )
    if not path.exists():
        return (
            Check(
                "vault",
                "fail",
                f"{path} does not exist",
                "mount or restore it, or correct [vault] path (or --vault); a running daemon "
                "waits for it to come back and never purges the index meanwhile",
            ),
            None,
        )
    if not path.is_dir():
        return (
            Check("vault", "fail", f"{path} is not a directory", "point [vault] path at a folder"),
            None,
        )
    if not os.access(path, os.R_OK | os.X_OK):
        return (
            Check("vault", "fail", f"{path} is not readable", f"chmod u+rx {quoted(path)}"),
            None,
        )
    discovery = Discovery(path, IgnoreRules.from_config(config.vault, config.attachments))
    try:
        notes = [state.path for state in discovery.walk()]
    except VaultdError as exc:
        return Check("vault", "fail", str(exc), f"chmod u+rx {quoted(path)}"), None
    folders = count_folders(path)
    cannot_read = discovery.unreadable
    unreadable = [f"{p} ({r})" for p, r in cannot_read]
    # lexists: a note's path is NFC, its name on disk may not be; that is not unreadable.
    unreadable += [
        f"{n} (permission denied)"
        for n in notes
        if not os.access(path / n, os.R_OK) and os.path.lexists(path / n)
    ]
    left_out = [f"{p} ({r})" for p, r in discovery.skipped if (p, r) not in cannot_read]
    found = f"{path}: {_by_kind(discovery, notes)} in {folders} folders"
    if left_out:
        found += f"; {len(left_out)} left out by the rules: {first_few(left_out)}"
    if unreadable:
        return (
            Check(
                "vault",
                "warn",
                f"{found}; {len(unreadable)} unreadable: {first_few(unreadable)}",
                "give your user read access (`chmod u+rX` on each path); until then vaultd "
                "keeps their last indexed chunks and retries them on every rescan",
            ),
            folders,
        )
    if not notes:
        return (
            Check(
                "vault",
                "warn",
                f"{found}: nothing to index",
                "check that [vault] path is the vault's root folder and that exclude/include "
                "do not leave out every note",
            ),
            folders,
        )
    return Check("vault", "ok", found), folders


def _by_kind(discovery: Discovery, files: Sequence[str]) -> str:
    """The files to index counted by kind, and those of kinds not indexed: "12 notes, 3 pdf
    (not indexed: 48 image, 2 other)". Nothing the vault holds goes unmentioned."""
    kinds: dict[str, int] = {}
    for file in files:
        kind = discovery.kind(file)
        kinds[kind] = kinds.get(kind, 0) + 1
    notes = kinds.pop("note", 0)
    counted = ", ".join([f"{notes} notes", *(f"{n} {k}" for k, n in sorted(kinds.items()))])
    skipped = discovery.unindexed
    if skipped:
        listed = ", ".join(f"{n} {k}" for k, n in sorted(skipped.items()))
        counted += f" (not indexed: {listed})"
    return counted
