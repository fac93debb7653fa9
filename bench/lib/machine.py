"""What machine a benchmark ran on, for the figures in docs/benchmarks.md."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine() -> str:
    """The cores and the CPU, as the results record the machine."""
    return f"{os.cpu_count()} cores, {cpu_model()}"
