"""The `vaultd` command's process settings, made before anything loads (vaultd/__main__.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from vaultd import __main__ as entry


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, object]]:
    """What the command's `main` finds when `run` calls it."""
    found: dict[str, object] = {}

    def main() -> None:
        found["blas"] = os.environ.get("OPENBLAS_NUM_THREADS")
        found["interval"] = sys.getswitchinterval()

    monkeypatch.setattr("vaultd.cli.commands.main", main)
    before = sys.getswitchinterval()
    try:
        yield found
    finally:
        sys.setswitchinterval(before)


def test_the_command_runs_with_one_blas_thread_and_a_short_gil_interval(
    seen: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    entry.run()
    assert seen == {"blas": "1", "interval": pytest.approx(entry.SWITCH_INTERVAL)}
    assert entry.SWITCH_INTERVAL < 0.005  # shorter than Python's own


def test_a_users_own_blas_threads_win(
    seen: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    entry.run()
    assert seen["blas"] == "4"
