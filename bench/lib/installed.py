"""The installed `vaultd` command a benchmark runs as a user would."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def vaultd_executable() -> str:
    """The `vaultd` script installed beside this interpreter, else the one on PATH."""
    beside = Path(sys.executable).with_name("vaultd")
    if beside.is_file():
        return str(beside)
    found = shutil.which("vaultd")
    if found is None:
        sys.exit("vaultd is not installed: pip install -e .")
    return found
