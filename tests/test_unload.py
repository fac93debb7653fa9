"""Memory at rest: the vector index and the model are closed when unused, and reopened on use."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from harness.daemon import running, wait_until
from tests.test_attachments import make_pdf
from vaultd.embedding.embedder import Embedder
from vaultd.embedding.spec import default_spec
from vaultd.storage.vectors import VectorStore


def _vectors(count: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(count, 384)).astype(np.float32)
    normalised: np.ndarray = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return normalised


def test_an_unused_store_is_closed_and_reopened_by_its_next_use(tmp_path: Path) -> None:
    store = VectorStore(collection="notes", vault_id="/v", model_id="m", path=tmp_path / "chroma")
    try:
        vectors = _vectors(50)
        ids = [f"id{i:02d}" for i in range(50)]
        store.upsert(ids, vectors, [f"text {i}" for i in ids], [{"path": f"{i}.md"} for i in ids])
        before = store.query(vectors[3], 5)
        assert before[0][0] == "id03"

        assert not store.release(3600), "just used: kept open"
        with store._chroma.in_use():  # an operation in flight on another thread
            assert not store.release(0)
        assert store.loaded
        assert store.release(0)
        assert not store.loaded
        assert not store.release(0), "already closed"

        # The next use opens it again, with everything it held.
        assert store.query(vectors[3], 5) == before
        assert store.loaded and store.count() == 50
        store.upsert(["new"], vectors[:1], ["new"], [{"path": "new.md"}])
        assert store.release(0)
        assert store.count() == 51
    finally:
        store.close()


def test_an_unused_model_is_closed_and_reopened_by_its_next_run() -> None:
    embedder = Embedder(default_spec(), threads=1)
    before = embedder.embed_query("otters hold hands while asleep")
    assert not embedder.unload(3600), "just used: kept open"
    assert embedder.unload(0)
    assert not embedder.loaded
    embedder.release_memory()  # idle housekeeping does not reopen it
    assert not embedder.loaded
    assert np.array_equal(embedder.embed_query("otters hold hands while asleep"), before)
    assert embedder.loaded


def readers(pid: int) -> list[int]:
    """The daemon's extraction workers now running (its children running `vaultd.pipeline`)."""
    found = []
    for child in Path(f"/proc/{pid}/task").glob("*/children"):
        for cpid in child.read_text().split():
            try:
                command = Path(f"/proc/{cpid}/cmdline").read_bytes()
            except OSError:
                continue  # ended meanwhile
            if b"vaultd.pipeline." in command:
                found.append(int(cpid))
    return found


@pytest.mark.slow
def test_an_idle_daemon_frees_its_index_and_model_and_serves_the_next_use(
    tmp_path: Path,
) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Otter.md").write_text("# Otter\n\nOtters hold hands while asleep.\n")
    # Read by a PDF worker, a child of the daemon until it is unused too.
    (vault / "Kestrel.pdf").write_bytes(make_pdf(["Kestrels hover facing into the wind."]))
    extra = '\n[schedule]\nunload = "1s"\n'
    with running(vault, tmp_path, extra=extra) as daemon:

        def closed() -> int:
            """Times both were closed for being unused, each after a use that opened both.

            Each is closed on the first idle tick after its own last use, so the two may be
            logged apart (a loaded machine stretches the time between a search's embedding
            and its query of the index): counted one by one, the lesser count is what both
            reached.
            """
            events = [json.loads(line) for line in daemon.log_text().splitlines() if "{" in line]
            unused = [e for e in events if e.get("event", "").startswith("unused for a while")]
            index = sum(1 for e in unused if e["vector_index"])
            model = sum(1 for e in unused if e["model"])
            return min(index, model)

        wait_until(lambda: closed() == 1, "the idle daemon closed its index and model")
        wait_until(lambda: not readers(daemon.process.pid), "the idle daemon ended its PDF worker")
        status = daemon.request("GET", "/v1/status")
        assert not status["store"]["loaded"] and not status["model_loaded"]
        shown = subprocess.run(
            [sys.executable, "-m", "vaultd", "status", "--config", str(daemon.config)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "(vector index and model closed while unused)" in shown

        # A search reopens both (they are closed again a second later) and finds the note.
        hits = daemon.search("sleeping otters", mode="vector", k=3)
        assert hits[0]["path"] == "Otter.md"
        wait_until(lambda: closed() == 2, "the search reopened both, closed again since")

        # An edit: the write path reopens them, and the edit is searchable.
        (vault / "Heron.md").write_text("# Heron\n\nHerons stand still in shallow water.\n")
        wait_until(
            lambda: (
                [h["path"] for h in daemon.search("heron in the shallows", k=1)] == ["Heron.md"]
            ),
            "the edit made after the unload is searchable",
        )
        events = [json.loads(line) for line in daemon.log_text().splitlines() if "{" in line]
        assert not [e for e in events if e.get("level") in ("error", "critical")]


@pytest.mark.slow
def test_unload_0_keeps_them_open_and_a_reload_applies_a_new_setting(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Otter.md").write_text("# Otter\n\nOtters hold hands while asleep.\n")
    with running(vault, tmp_path, extra='\n[schedule]\nunload = "0"\n') as daemon:
        time.sleep(2)
        status = daemon.request("GET", "/v1/status")
        assert status["store"]["loaded"] and status["model_loaded"]

        text = daemon.config.read_text().replace('unload = "0"', 'unload = "1s"')
        daemon.config.write_text(text)
        daemon.process.send_signal(signal.SIGHUP)

        def unloaded() -> bool:
            status = daemon.request("GET", "/v1/status")
            return not status["store"]["loaded"] and not status["model_loaded"]

        wait_until(unloaded, "the reloaded setting closed both")
