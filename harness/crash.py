"""A vaultd process killed with SIGKILL at a moment of the caller's choosing, and what a
restart recovers from what it left."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.convergence import Records
from vaultd.config import load_config
from vaultd.index.export import export_records
from vaultd.index.open import open_index


def kill_after(process: subprocess.Popen[bytes], delay: float) -> None:
    """SIGKILL `process` after `delay` seconds unless it has ended, and reap it."""
    time.sleep(delay)
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait(30)


def index_command(config: Path) -> list[str]:
    """`vaultd index` of `config`, as a subprocess to kill."""
    return [sys.executable, "-m", "vaultd", "index", "-q", "--config", str(config)]


def recover(config: Path) -> Records:
    """What a restart does first (a full reconcile), then the store's contents."""
    loaded = load_config(config, env={})
    with open_index(loaded, env={}) as index:
        index.indexer.reconcile()
        return list(export_records(index.store, with_vectors=True))
