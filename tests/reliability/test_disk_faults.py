"""Disk full and I/O errors under the daemon's data directory (RELIABILITY.md case 24).

Two ways to run out of space; the full-disk test runs with each one this machine allows (as
root in a container, both), and skips only the one it cannot set up, saying why:
- tmpfs: the data directory is a small tmpfs; a ballast file fills it, so SQLite's writes
  (Chroma's and the manifest's) fail with ENOSPC for real. Deleting the ballast gives the space
  back.
- fsize: RLIMIT_FSIZE lowered on the running daemon with prlimit(2); writes past the limit fail
  with EFBIG (CPython ignores SIGXFSZ, so the process is not killed). Set on the live process
  rather than at its start, the limit can be lifted again without a restart: the space coming
  back. SQLite reports EFBIG as a plain "disk I/O error", so this is also a real I/O error.

An EIO from the disk cannot be produced for real without dm-flakey; the last tests inject it
in process, at the Chroma layer and at the manifest's SQLite connection.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.convergence import assert_converged, assert_same, export_of, fresh_export
from harness.daemon import RunningDaemon, running, wait_until, write_config
from vaultd.config import load_config
from vaultd.errors import DaemonError, StoreError, StoreFullError
from vaultd.index.open import open_index
from vaultd.index.passes import Pacing

NEW = {"quokka.md": "quokka", "zymurgy.md": "zymurgy", "xylophone.md": "xylophone"}


def tmpfs_mountable() -> str:
    """Empty when a tmpfs can be mounted here, else why not."""
    target = Path(tempfile.mkdtemp(prefix="vd-tmpfs-"))
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(target)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            return done.stderr.strip() or f"mount exited with {done.returncode}"
        subprocess.run(["umount", str(target)], check=True)
        return ""
    except FileNotFoundError as exc:
        return str(exc)
    finally:
        target.rmdir()


@dataclass
class Space:
    """How the data directory runs out of space, and how the space comes back."""

    kind: str
    data: Path
    _limits: tuple[int, int] | None = None

    def fill(self, daemon: RunningDaemon) -> None:
        if self.kind == "tmpfs":
            with (self.data / "ballast").open("wb", buffering=0) as ballast:
                for size in (1 << 20, 4096, 1):
                    with contextlib.suppress(OSError):
                        while True:
                            ballast.write(b"\0" * size)
            assert shutil.disk_usage(self.data).free == 0
        else:
            pid = daemon.process.pid
            self._limits = resource.prlimit(pid, resource.RLIMIT_FSIZE)
            # Below Chroma's SQLite file (about 200 kB) and the manifest's WAL (256 kB), above
            # the daemon's log (a few kB, written through the same limit).
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (96 * 1024, self._limits[1]))

    def free(self, daemon: RunningDaemon) -> None:
        if self.kind == "tmpfs":
            (self.data / "ballast").unlink()
        else:
            assert self._limits is not None
            resource.prlimit(daemon.process.pid, resource.RLIMIT_FSIZE, self._limits)


@pytest.fixture(params=["tmpfs", "fsize"])
def space(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Space]:
    data = tmp_path / "data"
    data.mkdir()
    if request.param == "fsize":
        if not hasattr(resource, "prlimit"):
            pytest.skip("prlimit(2) is Linux-only; the tmpfs case covers a full disk")
        yield Space("fsize", data)
        return
    why = tmpfs_mountable()
    if why:
        pytest.skip(f"cannot mount a tmpfs here ({why}); the fsize case covers a full disk")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(data)], check=True)
    try:
        yield Space("tmpfs", data)
    finally:
        subprocess.run(["umount", "--lazy", str(data)], check=True)


def make_vault(root: Path) -> Path:
    vault = root / "vault"
    vault.mkdir()
    for name in ("alpha", "bravo", "charlie", "delta"):
        (vault / f"{name}.md").write_text(f"# {name.title()}\n\nAn ordinary note called {name}.\n")
    return vault


def health(daemon: RunningDaemon) -> dict[str, Any]:
    answer: dict[str, Any] = daemon.request("GET", "/v1/health")
    return answer


def test_a_full_disk_degrades_holds_the_manifest_back_and_resumes_by_itself(
    space: Space, tmp_path: Path
) -> None:
    vault = make_vault(tmp_path)
    with running(vault, tmp_path) as daemon:
        space.fill(daemon)
        for path, word in NEW.items():
            (vault / path).write_text(f"# {word.title()}\n\nA new note about the {word}.\n")

        wait_until(lambda: health(daemon)["status"] == "degraded", "the daemon reports it")
        assert daemon.process.poll() is None, daemon.log_text()
        status = daemon.request("GET", "/v1/status")
        reasons = " ".join(status["reasons"].values())
        if space.kind == "tmpfs":
            assert set(status["reasons"]) == {"disk"}
            assert "no space left on the disk holding" in reasons, reasons
            assert "database or disk is full" in reasons, reasons
            assert "indexing failed: no space left for the index; retrying" in daemon.log_text()
        else:
            assert "disk I/O error" in reasons, reasons
            assert "indexing failed" in daemon.log_text()
        assert health(daemon)["reason"] == "; ".join(status["reasons"].values())

        # The manifest holds nothing the store refused: the new notes are not claimed, the old
        # ones still answer.
        assert status["notes"] == 4
        for path, word in NEW.items():
            with pytest.raises(DaemonError) as missing:
                daemon.request("GET", f"/v1/notes/{path}")
            assert missing.value.status == 404
            assert daemon.search(word, mode="keyword") == []
        assert daemon.search("ordinary note called bravo", k=1)[0]["path"] == "bravo.md"

        space.free(daemon)
        # No restart and no request: the worker's retry finds the space.
        for path, word in NEW.items():
            hits = daemon.search(word, mode="keyword", wait_for=path)
            assert [h["path"] for h in hits] == [path]
        wait_until(lambda: health(daemon)["status"] == "ok", "the daemon recovers")
        assert daemon.request("GET", "/v1/status")["reasons"] == {}
        assert daemon.process.poll() is None

        assert_converged(daemon, vault, tmp_path)


# -- an I/O error from the disk, injected where it surfaces --------------------------------------


def open_small_index(root: Path) -> tuple[Path, Path]:
    vault = make_vault(root)
    config = write_config(root / "vaultd.toml", vault, root / "data", root / "unused.sock")
    with open_index(load_config(config, env={}), env={}) as index:
        index.indexer.reconcile()
    for path, word in NEW.items():
        (vault / path).write_text(f"# {word.title()}\n\nA new note about the {word}.\n")
    return vault, config


def manifest_claims(index: Any) -> set[str]:
    """The chunks the manifest has vectors for: those the store must hold."""
    return set(index.manifest.vectors.embedded_ids(index.embedder.model_id))


class _FailingConnection:
    """The manifest's SQLite connection, failing the first write of one transaction with EIO."""

    def __init__(self, real: sqlite3.Connection) -> None:
        self.real = real
        self.armed = False

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self._maybe_fail(sql)
        return self.real.execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self._maybe_fail(sql)
        return self.real.executemany(sql, *args)

    def _maybe_fail(self, sql: str) -> None:
        if self.armed and sql.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")):
            self.armed = False
            raise sqlite3.OperationalError("disk I/O error")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.mark.parametrize("layer", ["chroma", "manifest"])
def test_an_io_error_for_one_batch_holds_the_manifest_back_and_the_next_pass_converges(
    layer: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault, config_path = open_small_index(tmp_path)
    config = load_config(config_path, env={})
    # One note per batch of the embedding phase: the fault hits the second batch, after the
    # first was committed (the keyword phase recorded every new note before either).
    with open_index(config, env={}, pacing=Pacing(batch_chunks=1)) as index:
        before = manifest_claims(index)
        if layer == "chroma":
            from chromadb.api.models.Collection import Collection

            real_upsert = Collection.upsert
            calls = []

            def upsert(self: Any, *args: Any, **kwargs: Any) -> None:
                calls.append(1)
                if len(calls) == 2:
                    # What chromadb raises when SQLite reports SQLITE_IOERR.
                    from chromadb.errors import InternalError

                    raise InternalError("error returned from database: (code: 10) disk I/O error")
                real_upsert(self, *args, **kwargs)

            monkeypatch.setattr(Collection, "upsert", upsert)
        else:
            failing = _FailingConnection(index.manifest._db)
            calls = []

            def arm_on_second_batch(*args: Any, **kwargs: Any) -> None:
                calls.append(1)
                failing.armed = len(calls) == 2
                real_add(*args, **kwargs)

            real_add = index.manifest.add_vectors
            monkeypatch.setattr(index.manifest, "_db", failing)
            monkeypatch.setattr(index.manifest, "add_vectors", arm_on_second_batch)

        with pytest.raises(StoreError, match="disk I/O error") as raised:
            index.indexer.reconcile()
        assert not isinstance(raised.value, StoreFullError)  # an I/O error is not a full disk
        monkeypatch.undo()

        claimed = manifest_claims(index)
        stored = index.store.ids()
        # Every new note is searchable by its words; one batch of vectors went through, the
        # failed one did not advance the manifest ...
        assert all(index.manifest.notes.row(p) is not None for p in NEW)
        assert before < claimed
        waiting = index.manifest.vectors.awaiting_paths(index.embedder.model_id, NEW)
        assert len(waiting) == len(NEW) - 1
        # ... and the manifest never claims what the store lacks.
        assert claimed <= stored

        summary = index.indexer.reconcile()
        assert summary.notes_changed == 0 and summary.chunks_embedded == len(NEW) - 1
        assert manifest_claims(index) == index.store.ids()
    assert_same(export_of(config_path), fresh_export(vault, tmp_path / "reference"))


def test_disk_full_is_told_apart_from_other_store_errors() -> None:
    from vaultd.storage.chroma import is_disk_full

    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = sqlite3.SQLITE_FULL
    assert not is_disk_full(StoreError("cannot write"))
    wrapped = StoreError("cannot write")
    wrapped.__cause__ = full
    assert is_disk_full(wrapped)
    assert is_disk_full(OSError(28, os.strerror(28)))
    assert is_disk_full(OSError(27, os.strerror(27)))  # EFBIG: a file-size limit
    assert not is_disk_full(OSError(5, os.strerror(5)))
    assert not is_disk_full(StoreError("error returned from database: (code: 10) disk I/O error"))
