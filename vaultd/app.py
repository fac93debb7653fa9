"""The composition root for one open index: builds the parts in order, closes them in reverse.

Commands (`index`, `search`, `export`) and the daemon open the index through `open_index`;
nothing else wires stages together.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from vaultd.config import Config
from vaultd.errors import StoreMismatchError
from vaultd.indexer import Indexer
from vaultd.lock import DataDirLock
from vaultd.manifest import Manifest
from vaultd.models import load_spec
from vaultd.pipeline.discover import Discovery, IgnoreRules
from vaultd.pipeline.embed import Embedder
from vaultd.pipeline.store import VectorStore, collection_name
from vaultd.probe import check_store, mark_closed, mark_open
from vaultd.search import Searcher
from vaultd.tokens import TokenCounter

CHROMA_DIR = "chroma"


@dataclass(frozen=True, slots=True)
class Index:
    """Everything an open index consists of."""

    config: Config
    vault: Path
    data_dir: Path
    manifest: Manifest
    store: VectorStore
    embedder: Embedder
    indexer: Indexer
    searcher: Searcher


def _check_owner(manifest: Manifest, vault: Path, model_id: str) -> None:
    """A data directory serves one vault; refuse to mix another vault's notes into it."""
    recorded = manifest.get_meta("vault")
    if recorded is None:
        manifest.set_meta("vault", str(vault))
    elif recorded != str(vault):
        raise StoreMismatchError(
            f"{manifest.path.parent} holds the index of {recorded}, not {vault}; "
            "give this vault its own [store] path"
        )
    manifest.set_meta("model", model_id)


@contextmanager
def open_index(config: Config, env: Mapping[str, str] | None = None) -> Iterator[Index]:
    """Lock the data directory and open the manifest, the store and the model."""
    env = os.environ if env is None else env
    vault = config.require_vault()
    data_dir = config.require_store()
    # Chroma's SQLite puts temporary files in /tmp by default; keep them on the data disk.
    os.environ.setdefault("SQLITE_TMPDIR", str(data_dir))
    with ExitStack() as stack:
        lock = DataDirLock(data_dir)
        lock.acquire()
        stack.callback(lock.release)
        spec = load_spec(config.embedding.model)
        if not config.store.url:
            check_store(data_dir, data_dir / CHROMA_DIR)
            mark_open(data_dir)
            stack.callback(mark_closed, data_dir)
        manifest = Manifest(data_dir)
        stack.callback(manifest.close)
        _check_owner(manifest, vault, spec.id)
        embedder = Embedder(
            spec, threads=config.embedding.threads, batch_size=config.embedding.batch_size
        )
        store = VectorStore(
            collection=config.store.collection or collection_name(vault, spec.id),
            vault_id=str(vault),
            model_id=spec.id,
            path=None if config.store.url else data_dir / CHROMA_DIR,
            url=config.store.url,
            token=env.get(config.store.token_env, ""),
        )
        stack.callback(store.close)
        counter = TokenCounter.for_spec(spec)
        discovery = Discovery(vault, IgnoreRules.from_config(config.vault))
        indexer = Indexer(
            root=vault,
            discovery=discovery,
            manifest=manifest,
            store=store,
            embedder=embedder,
            counter=counter,
            max_tokens=min(config.chunking.max_tokens, spec.window),
            max_bytes=int(config.vault.max_file_mb * 1024 * 1024),
        )
        yield Index(
            config=config,
            vault=vault,
            data_dir=data_dir,
            manifest=manifest,
            store=store,
            embedder=embedder,
            indexer=indexer,
            searcher=Searcher(manifest, store, embedder, config.search),
        )
