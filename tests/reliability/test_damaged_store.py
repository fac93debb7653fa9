"""A damaged, lost or disagreeing Chroma store, met by the real daemon at start-up.

Each case damages the store of a small index while no daemon runs, starts `vaultd run`, and
checks what it reports (log and `/v1/status`), that searches answer, that nothing is embedded
again (the manifest holds every vector), and that the index converges to a fresh one.

chromadb 1.5.9 keeps a collection's vectors in its SQLite log until `hnsw:sync_threshold`
(1000) records arrive, and only then writes the HNSW segment (data_level0.bin, link_lists.bin,
header.bin, length.bin and index_metadata.pickle). The template index below is created with a
threshold of 2, so that a dozen notes have a segment on disk, as a real vault's store does.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.convergence import assert_converged
from harness.daemon import RunningDaemon, running, write_config
from vaultd.config import load_config
from vaultd.embedding.derive import model_id
from vaultd.embedding.spec import load_spec
from vaultd.index.open import open_index
from vaultd.layout import CHROMA as CHROMA_DIR
from vaultd.storage.chroma import collection_name

TOPICS = [
    "volcano eruption lava",
    "violin concerto strings",
    "glacier ice retreat",
    "sourdough bread starter",
    "tide pools and crabs",
    "chess opening gambit",
    "comet tail and orbit",
    "beekeeping and honey",
    "origami paper crane",
    "lighthouse keeper",
    "desert cactus bloom",
    "submarine sonar ping",
]


@pytest.fixture(scope="module")
def vault(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shared by every case: none of them writes to it, and a copied data directory must find
    the vault it was built for at the same path."""
    root = tmp_path_factory.mktemp("damaged") / "vault"
    root.mkdir()
    for topic in TOPICS:
        name = topic.split()[0]
        (root / f"{name}.md").write_text(f"# {name.title()}\n\nA note about {topic}.\n")
    return root


def _collection(data: Path) -> tuple[Any, str]:
    """A chromadb client on `data`'s store and the name of vaultd's collection in it."""
    import chromadb
    from chromadb.config import Settings

    config = load_config(data.parent / "template.toml", env={})
    name = config.store.collection or collection_name(
        config.require_vault(),
        model_id(load_spec(config.embedding.model).id, config.embedding.precision),
    )
    client = chromadb.PersistentClient(
        path=str(data / CHROMA_DIR), settings=Settings(anonymized_telemetry=False)
    )
    return client, name


@pytest.fixture(scope="module")
def template(vault: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory indexed from `vault`, closed cleanly, with an HNSW segment on disk."""
    root = tmp_path_factory.mktemp("template")
    data = root / "data"
    config_path = write_config(root / "template.toml", vault, data, root / "unused.sock")
    client, name = _collection(data)
    client.get_or_create_collection(
        name,
        metadata={"hnsw:space": "cosine", "hnsw:sync_threshold": 2, "hnsw:batch_size": 2},
        embedding_function=None,
    )
    client.close()
    with open_index(load_config(config_path, env={}), env={}) as index:
        summary = index.indexer.reconcile()
    assert summary.notes_changed == len(TOPICS)
    return data


def seed(template: Path, workdir: Path) -> Path:
    """A copy of the template's data directory where `running(vault, workdir)` expects it."""
    data = workdir / "data"
    # copy2 keeps mtimes: the copy is the same clean store, not a changed one.
    shutil.copytree(template, data, copy_function=shutil.copy2)
    shutil.copy2(template.parent / "template.toml", workdir / "template.toml")
    return data


def segment(data: Path) -> Path:
    folders = [p for p in (data / CHROMA_DIR).iterdir() if p.is_dir()]
    assert len(folders) == 1, folders
    return folders[0]


def truncate_level0(data: Path) -> int:
    os.truncate(segment(data) / "data_level0.bin", 64)
    return len(TOPICS)


def truncate_link_lists(data: Path) -> int:
    links = segment(data) / "link_lists.bin"
    assert links.stat().st_size > 0  # some nodes sit above level 0: there is something to cut
    os.truncate(links, links.stat().st_size // 2)
    return 0


def garbage_sqlite(data: Path) -> int:
    with (data / CHROMA_DIR / "chroma.sqlite3").open("r+b") as handle:
        handle.write(os.urandom(4096))
    return len(TOPICS)


def delete_index_metadata(data: Path) -> int:
    # chromadb 1.5.9's Rust segment still writes the pickle that maps ids to HNSW labels.
    (segment(data) / "index_metadata.pickle").unlink()
    return len(TOPICS)


def delete_collection(data: Path) -> int:
    client, name = _collection(data)
    client.delete_collection(name)
    client.close()
    return len(TOPICS)


def disagree(data: Path) -> int:
    """Three chunks the manifest lists are missing from Chroma, one Chroma holds is unknown."""
    client, name = _collection(data)
    collection = client.get_collection(name)
    ids = sorted(collection.get(include=[])["ids"])
    collection.delete(ids=ids[:3])
    collection.upsert(
        ids=["orphan-0"],
        embeddings=np.full((1, 384), 1 / np.sqrt(384), dtype=np.float32),
        documents=["an orphan no note holds"],
        metadatas=[{"path": "gone.md"}],
    )
    client.close()
    return 4


#: name → (damage, returning how many records the first pass must restore; moved aside?)
CASES: dict[str, tuple[Callable[[Path], int], bool]] = {
    "data_level0.bin truncated": (truncate_level0, True),
    "link_lists.bin truncated": (truncate_link_lists, False),
    "chroma.sqlite3 garbage": (garbage_sqlite, True),
    "index_metadata.pickle deleted": (delete_index_metadata, True),
    "collection deleted": (delete_collection, False),
    "manifest and Chroma disagree": (disagree, False),
}


def asides(data: Path) -> list[Path]:
    return sorted(p for p in data.iterdir() if p.name.startswith(f"{CHROMA_DIR}.damaged-"))


def top_path(daemon: RunningDaemon, query: str, mode: str = "vector") -> str:
    hits = daemon.search(query, k=1, mode=mode)
    assert hits, query
    return str(hits[0]["path"])


@pytest.mark.parametrize("case", list(CASES))
def test_a_damaged_store_is_found_at_start_up_and_rebuilt_without_embedding(
    case: str, vault: Path, template: Path, tmp_path: Path
) -> None:
    damage, moved = CASES[case]
    data = seed(template, tmp_path)
    restored = damage(data)

    with running(vault, tmp_path, wait_ready=False) as daemon:
        # Searches answer from the first moment, whatever the rebuild has restored so far.
        assert isinstance(daemon.search("lava", mode="hybrid"), list)
        daemon.wait_idle()
        status = daemon.request("GET", "/v1/status")
        log = daemon.log_text()

        # The damage was looked at before the store was opened in the daemon's own process.
        assert "probing the vector store in a child process" in log
        assert "the store's files changed since vaultd last closed it" in log
        found = asides(data)
        if moved:
            assert len(found) == 1, found
            assert "the vector store was damaged; moved aside" in log
            record = status["store"]["moved_aside"]
            assert record["moved_to"] == str(found[0])
            assert record["problem"]
        else:
            # The store opens and answers right: it is kept and repaired in place.
            assert found == []
            assert status["store"]["moved_aside"] is None
        assert status["last_reconcile"]["store_repaired"] == restored
        if restored:
            assert "store repaired from the manifest" in log
        # Every vector came back from the manifest.
        assert status["embedded_total"] == 0
        assert status["status"] == "ok", status["reasons"]
        assert status["chunks"] == len(TOPICS)
        assert top_path(daemon, "lava flowing from a mountain") == "volcano.md"
        assert top_path(daemon, "a bow on a stringed instrument") == "violin.md"
        assert top_path(daemon, "honey", mode="hybrid") == "beekeeping.md"

        assert_converged(daemon, vault, tmp_path)
