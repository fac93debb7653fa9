"""Clients of a running daemon start light: they load none of the model's runtime, its
tokenizer, the store's client or numpy, which only the daemon needs (docs/benchmarks.md,
"Start-up of the light clients"). Nor does `vaultd --help`, which reads the API's
declarations for the commands' help."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness.daemon import running

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("onnxruntime", "chromadb", "tokenizers", "numpy")


def imported(command: list[str]) -> set[str]:
    """Every module `command` imports, from `python -X importtime`'s report."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "vaultd", *command],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    return {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}


def heavy(modules: set[str]) -> list[str]:
    return sorted({m.split(".")[0] for m in modules} & set(HEAVY))


def test_status_and_search_through_a_daemon_load_nothing_heavy(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    shutil.copytree(ROOT / "examples" / "vault", vault)
    with running(vault, tmp_path) as daemon:
        config = str(daemon.config)
        for command in (
            ["status", "--json", "--config", config],
            ["status", "--config", config],
            [
                "search",
                "garden",
                "--json",
                "--explain",
                "--where",
                "status=done",
                "--config",
                config,
            ],
        ):
            modules = imported(command)
            assert "vaultd.api.client" in modules, command  # it did ask the daemon
            assert not heavy(modules), command


def test_help_loads_nothing_heavy() -> None:
    modules = imported(["--help"])
    assert "vaultd.api.operations" in modules  # the commands' help is read from it
    assert not heavy(modules)


def test_the_api_models_are_built_when_first_used_and_all_before_serving() -> None:
    """Importing the declarations builds none of their models; `build` (the server's, before
    its first request) builds every one."""
    code = """
import vaultd.api.operations as o
models = [m for m in vars(o).values() if isinstance(m, type) and issubclass(m, o.BaseModel)]
# Not the generic base (`Whole[T]`), which no answer is.
mine = [
    m for m in models
    if m.__module__ == o.__name__ and not m.__pydantic_generic_metadata__["parameters"]
]
print(len(mine), sum(m.__pydantic_complete__ for m in mine))
o.build()
print(sum(m.__pydantic_complete__ for m in mine))
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    (models, built), (after,) = (map(int, line.split()) for line in done.stdout.splitlines())
    assert models > 30
    assert built == 0
    assert after == models
