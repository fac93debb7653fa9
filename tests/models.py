"""`vaultd model build` run as a user runs it, with doctor's model check before and after."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from vaultd.doctor.checks import diagnose
from vaultd.doctor.report import Check
from vaultd.embedding.derive import cache_dir


def model_check(config: Path, env: Mapping[str, str]) -> Check:
    """Doctor's finding on the model `config` asks for."""
    return {c.name: c for c in diagnose(config, None, env).checks}["model"]


@dataclass(frozen=True)
class Build:
    before: Check
    done: subprocess.CompletedProcess[str]
    #: Doctor's finding after a build that succeeded; None after one that failed.
    after: Check | None
    #: The models cache the build wrote to (`XDG_CACHE_HOME`'s).
    models: Path


def model_build(config: Path, env: dict[str, str]) -> Build:
    before = model_check(config, env)
    done = subprocess.run(
        [sys.executable, "-m", "vaultd", "model", "build", "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    after = model_check(config, env) if done.returncode == 0 else None
    return Build(before, done, after, cache_dir(env))
