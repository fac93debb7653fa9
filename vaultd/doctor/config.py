"""The config check: the configuration loads and validates, and its log file can be opened."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from vaultd.config import Config, load_config
from vaultd.doctor.report import Check
from vaultd.errors import ConfigError
from vaultd.hints import suggest


def check_config(
    config_file: Path | None, vault: Path | None, env: Mapping[str, str]
) -> tuple[Check, Config | None]:
    """The configuration loaded and validated (every problem listed at once), and the log file
    it names one the daemon can open. Returns the configuration when it loaded."""
    try:
        config = load_config(config_file, vault=vault, env=env)
    except ConfigError as exc:
        where = exc.source or "the configuration"
        return (
            Check(
                "config",
                "fail",
                f"{where} is invalid: " + "; ".join(exc.problems),
                f"correct {'it' if len(exc.problems) == 1 else 'each of these'} in {where}, "
                f"then run {suggest('doctor')} again",
            ),
            None,
        )
    source = str(config.source) if config.source else "no config file (defaults and flags)"
    problem = _log_file_problem(config.log.file)
    if problem:
        return (
            Check(
                "config",
                "fail",
                f"[log] file: {problem}",
                "point [log] file at a writable path, or leave it empty for stderr",
            ),
            config,
        )
    return Check("config", "ok", f"{source}: valid"), config


def _log_file_problem(setting: str) -> str | None:
    """Why the daemon could not open its log file (it exits 78 then), or None."""
    if not setting:
        return None
    path = Path(os.path.expanduser(setting))
    if path.exists():
        if path.is_dir():
            return f"{path} is a directory"
        return None if os.access(path, os.W_OK) else f"{path} is not writable"
    parent = path.parent
    if not parent.is_dir():
        return f"{parent} does not exist"
    return None if os.access(parent, os.W_OK | os.X_OK) else f"{parent} is not writable"
