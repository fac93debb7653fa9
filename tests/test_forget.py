"""`vaultd forget`: a vault's index goes, its notes stay; a daemon's index, or a folder that is
not vaultd's, is never removed; `--models` empties the derived models' cache."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.daemon import PATIENCE, copy_built_models, wait_until
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
    # Declined: nothing done as asked, no usage error (2), so 1.
    assert code == 1 and "nothing removed" in output
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
        # In a process of its own: one that built it holds the cache while it lives.
        built = vaultd("model", "build", env=env)
        assert built.returncode == 0, built.stderr
    code, output = invoke(["forget", "--models"], env, input="n\n")
    assert code == 1 and cache.is_dir()
    code, output = invoke(["forget", "--models", "--yes"], env)
    assert code == 0, output
    assert f"removed {cache}" in output
    assert not cache.exists() and cache.parent.is_dir()
    code, output = invoke(["forget", "--models", "--yes"], env)
    assert code == 2 and "does not exist" in output


# -- what is not vaultd's is never removed (issue 51, finding 5) --------------------------------
#
# Before: the check resolved the data directory's link and looked at name prefixes, so
# `forget --yes` on a link to a folder holding an empty vaultd.db and vaultd-thesis.docx
# removed the folder, thesis included; `--models` removed whatever `$XDG_CACHE_HOME/vaultd`
# linked to, printed a traceback on a `models` link, and deleted the model a running daemon
# used (its next search exited 70 "cannot load the ONNX model ... File doesn't exist").

VAULTD = [sys.executable, "-m", "vaultd"]


def vaultd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*VAULTD, *args],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        env={**os.environ, **(env or {})},
        check=False,
    )


def thesis_folder(root: Path) -> Path:
    folder = root / "mydocs"
    folder.mkdir()
    (folder / MANIFEST).write_bytes(b"")
    (folder / "vaultd-thesis.docx").write_bytes(b"PK\x03\x04 four years of work")
    return folder


@pytest.mark.parametrize("through", ["link", "folder"])
def test_forget_never_removes_a_folder_of_documents(tmp_path: Path, through: str) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    folder = thesis_folder(tmp_path)
    store = folder
    if through == "link":
        store = tmp_path / "data"
        store.symlink_to(folder)
    config = tmp_path / "c.toml"
    config.write_text(f'[vault]\npath = "{vault}"\n[store]\npath = "{store}"\n', "utf-8")
    done = vaultd("forget", "--config", str(config), "--yes")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "nothing removed" in done.stderr and "Traceback" not in done.stderr
    assert (folder / "vaultd-thesis.docx").read_bytes().endswith(b"four years of work")
    assert (folder / MANIFEST).is_file()
    if through == "link":
        assert store.is_symlink() and "link" in done.stderr
    else:
        assert "vaultd-thesis.docx" in done.stderr


@pytest.mark.parametrize("linked", ["vaultd", "vaultd/models"])
def test_forget_models_follows_no_link(tmp_path: Path, linked: str) -> None:
    cache_home = tmp_path / "cache"
    cache_home.mkdir()
    mydocs = tmp_path / "mydocs"
    (mydocs / "models").mkdir(parents=True)
    (mydocs / "models" / "letter.txt").write_text("mine\n")
    (mydocs / "letter.txt").write_text("mine too\n")
    if linked == "vaultd":
        (cache_home / "vaultd").symlink_to(mydocs)
    else:
        (cache_home / "vaultd").mkdir()
        (cache_home / "vaultd" / "models").symlink_to(mydocs)
    done = vaultd("forget", "--models", "--yes", env={"XDG_CACHE_HOME": str(cache_home)})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "nothing removed" in done.stderr
    assert "link" in done.stderr
    assert (mydocs / "models" / "letter.txt").read_text() == "mine\n"
    assert (mydocs / "letter.txt").read_text() == "mine too\n"
    assert (cache_home / linked).is_symlink()


def test_forget_models_keeps_a_cache_holding_what_vaultd_did_not_put_there(
    tmp_path: Path,
) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    cache = cache_dir(env)
    copy_built_models(cache_dir(os.environ), cache)
    (cache / "notes-backup.zip").write_bytes(b"PK")
    done = vaultd("forget", "--models", "--yes", env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "notes-backup.zip" in done.stderr
    assert (cache / "notes-backup.zip").is_file()


def test_forget_models_is_refused_while_a_daemon_uses_them_and_a_lost_model_is_built_again(
    tmp_path: Path,
) -> None:
    from harness.daemon import running

    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    cache = cache_dir(env)
    copy_built_models(cache_dir(os.environ), cache)
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Garden.md").write_text("# Garden\n\nWater the tomatoes in the morning.\n")
    extra = '\n[schedule]\nunload = "1s"\n'
    with running(vault, tmp_path, env=env, extra=extra) as daemon:
        assert daemon.search("tomatoes", k=1)
        built = sorted(p.name for p in cache.glob("*.onnx"))
        assert built
        done = vaultd("forget", "--models", "--yes", env=env)
        assert done.returncode == 75, done.stdout + done.stderr
        assert "stop it first" in done.stderr or "in use" in done.stderr, done.stderr
        assert sorted(p.name for p in cache.glob("*.onnx")) == built
        # A cache cleaner removes it anyway, while the daemon has its model unloaded: the next
        # search builds it again instead of failing.
        wait_until(
            lambda: not daemon.request("GET", "/v1/status")["model_loaded"], "the model unloads"
        )
        shutil.rmtree(cache)
        found = vaultd("search", "--config", str(daemon.config), "watering tomatoes", env=env)
        assert found.returncode == 0, found.stdout + found.stderr
        assert "Garden.md" in found.stdout
        # The model the daemon used is built again (the cache copied in may hold others).
        rebuilt = {p.name for p in cache.glob("*.onnx")}
        assert rebuilt and rebuilt <= set(built), (rebuilt, built)
    # Once nothing uses them, they go.
    done = vaultd("forget", "--models", "--yes", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not cache.exists()
