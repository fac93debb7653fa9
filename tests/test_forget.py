"""`vaultd forget`: a vault's index goes, its notes stay; a daemon's index, or a folder that is
not vaultd's, is never removed; `--models` empties the derived models' cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.daemon import copy_built_models
from tests.small_vault import write_vault
from vaultd.cli.commands import main
from vaultd.embedding.derive import cache_dir
from vaultd.layout import CHROMA, MANIFEST

NOTES = {"Garden.md": "# Garden\n\nWater in the morning.\n", "Ideas/Seeds.md": "# Seeds\n"}


def invoke(args: list[str], env: dict[str, str], input: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, args, env=env, input=input, catch_exceptions=False)
    return result.exit_code, result.output


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def indexed(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(config, vault, data directory) of a vault indexed for real."""
    config = write_vault(tmp_path, NOTES)
    code, output = invoke(["index", "-q", "--config", str(config)], {})
    assert code == 0, output
    data = tmp_path / "data"
    assert (data / MANIFEST).is_file() and (data / CHROMA).is_dir()
    return config, tmp_path / "vault", data


def test_forget_asks_then_removes_the_index_and_never_the_vault(
    indexed: tuple[Path, Path, Path],
) -> None:
    config, vault, data = indexed
    notes = snapshot(vault)
    code, output = invoke(["forget", "--config", str(config)], {}, input="n\n")
    assert code == 2 and "nothing removed" in output
    assert (data / MANIFEST).is_file()
    code, output = invoke(["forget", "--config", str(config)], {}, input="y\n")
    assert code == 0, output
    assert f"remove the index of {vault}" in output and f"removed {data}" in output
    assert not data.exists()
    assert snapshot(vault) == notes
    # Again: nothing left to remove, and said so.
    code, output = invoke(["forget", "--config", str(config), "--yes"], {})
    assert code == 2 and "does not exist" in output


def test_forget_refuses_while_a_process_holds_the_index(
    indexed: tuple[Path, Path, Path],
) -> None:
    config, _, data = indexed
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; "
            "from vaultd.storage.lock import DataDirLock, Holder; "
            f"lock = DataDirLock(Path({str(data)!r}), Holder.INDEX); lock.acquire(); "
            "print('held', flush=True); "
            "sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"  # the lock is taken: wait for it
        code, output = invoke(["forget", "--config", str(config), "--yes"], {})
        assert code == 75, output
        assert f"pid {holder.pid}" in output and "stop it first" in output
        assert "query it" not in output  # querying instead is no way to forget
        assert (data / MANIFEST).is_file()
    finally:
        holder.kill()
        holder.communicate(timeout=30)  # reaps it and closes both pipes
    code, output = invoke(["forget", "--config", str(config), "--yes"], {})
    assert code == 0, output
    assert not data.exists()


def test_forget_refuses_a_folder_that_is_not_vaultds(tmp_path: Path) -> None:
    """A [store] path pointed at a folder of documents by mistake is not emptied."""
    vault = tmp_path / "vault"
    vault.mkdir()
    documents = tmp_path / "Documents"
    documents.mkdir()
    (documents / "taxes.pdf").write_bytes(b"%PDF")
    (documents / MANIFEST).write_bytes(b"")
    config = tmp_path / "c.toml"
    config.write_text(f'[vault]\npath = "{vault}"\n[store]\npath = "{documents}"\n', "utf-8")
    code, output = invoke(["forget", "--config", str(config), "--yes"], {})
    assert code == 2
    assert "does not look like a vaultd data directory" in output and "taxes.pdf" in output
    assert (documents / "taxes.pdf").is_file()
    # No vault configured at all: nothing to go by.
    code, output = invoke(["forget", "--yes"], {"VAULTD_CONFIG": "", "HOME": str(tmp_path)})
    assert code == 2 and "--vault DIR" in output


def test_forget_models_removes_the_cache(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    cache = cache_dir(env)
    # A copy of what the other tests built, else a build of its own.
    copy_built_models(cache_dir(os.environ), cache)
    if not any(cache.glob("*.onnx")):
        from vaultd.embedding.derive import ensure
        from vaultd.embedding.spec import load_spec

        ensure(load_spec("default"), cache)
    code, output = invoke(["forget", "--models"], env, input="n\n")
    assert code == 2 and cache.is_dir()
    code, output = invoke(["forget", "--models", "--yes"], env)
    assert code == 0, output
    assert f"removed {cache}" in output
    assert not cache.exists() and cache.parent.is_dir()
    code, output = invoke(["forget", "--models", "--yes"], env)
    assert code == 2 and "does not exist" in output
