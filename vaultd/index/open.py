"""The composition root for one open index: builds the parts in order, closes them in reverse.

Commands (`index`, `search`, `export`) and the daemon open the index through `open_index`;
nothing else wires stages together.

What the data directory was built with is recorded in the manifest's meta table and checked at
every open:
- `vault`: a data directory serves one vault.
- `chromadb_version`: the chromadb that last opened the embedded store. Chroma migrates a store
  forward when it opens it and cannot go back, and chromadb 1.5.9 opens a store written by a
  newer version without a word; so a store last opened by a newer chromadb is refused before
  anything opens it, and an older one is opened (migrated) and the record moved forward.
- `model` and `model_dimensions`: each model has a collection of its own (its id is in the
  collection's name) and its own vectors in the manifest (keyed by model id). Changing
  `[embedding] model` therefore starts a new collection, filled by the next full pass; the
  old collection and the old model's vectors are dropped after the first full pass that
  completes with the new model (`_upkeep`), so a switch back before then costs no embedding.
  Meanwhile searches answer from the new collection as it fills (the daemon's status shows the
  full reconcile under way). A model whose dimension changed under the same id is refused: its
  stored vectors would be mixed with the new ones.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import structlog
from packaging.version import InvalidVersion, Version

from vaultd.config import Config
from vaultd.embedding.derive import cache_dir, derived_spec
from vaultd.embedding.embedder import Embedder, TextEmbedder
from vaultd.embedding.paired import PairedEmbedder, paired_id
from vaultd.embedding.spec import ModelSpec, load_spec
from vaultd.embedding.tokens import TokenCounter, chunk_budget
from vaultd.errors import NotIndexedError, StoreError, StoreMismatchError
from vaultd.faults import Faults
from vaultd.index.extract import Extraction
from vaultd.index.indexer import Indexer
from vaultd.index.models import LANGUAGES_META, MODEL_META, choose, sample
from vaultd.index.parsers import ParserPool
from vaultd.index.passes import Pacing, PassSettings
from vaultd.index.related import RelatedNotes
from vaultd.index.search import Searcher
from vaultd.isolation import close_children
from vaultd.layout import CHROMA, MANIFEST, tighten
from vaultd.pipeline.discover import Discovery, IgnoreRules
from vaultd.pipeline.languages import Languages, latin_query, measure, reads_english
from vaultd.storage.chroma import collection_name
from vaultd.storage.lock import DataDirLock, Holder, unusable
from vaultd.storage.manifest import Manifest
from vaultd.storage.probe import check_store, mark_closed, mark_open
from vaultd.storage.upkeep import CHROMA_DATABASE, enable_log_pruning
from vaultd.storage.vectors import VectorStore

#: Manifest meta keys (see the module's docstring).
CHROMADB_META = "chromadb_version"
DIMENSIONS_META = "model_dimensions"

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Index:
    """Everything an open index consists of."""

    config: Config
    vault: Path
    data_dir: Path
    manifest: Manifest
    store: VectorStore
    embedder: TextEmbedder
    indexer: Indexer
    searcher: Searcher
    related: RelatedNotes


def _check_owner(manifest: Manifest, vault: Path) -> None:
    """A data directory serves one vault; refuse to mix another vault's notes into it."""
    recorded = manifest.get_meta("vault")
    if recorded is None:
        manifest.set_meta("vault", str(vault))
    elif recorded != str(vault):
        raise StoreMismatchError(
            f"{manifest.path.parent} holds the index of {recorded}, not {vault}; "
            "give this vault its own [store] path"
        )


def _check_model(manifest: Manifest, model_id: str, width: int) -> None:
    """Record the model; refuse one whose dimension changed under the same id."""
    recorded = manifest.get_meta(MODEL_META)
    dimensions = manifest.get_meta(DIMENSIONS_META)
    if recorded == model_id and dimensions not in (None, str(width)):
        raise StoreMismatchError(
            f"the model {model_id!r} now has {width} dimensions, but the index in "
            f"{manifest.path.parent} was built with {dimensions}; vectors of two shapes cannot "
            "share an id. Give the model directory a new id in its vaultd-model.json: a new "
            "id gets a collection of its own, filled by the next full pass"
        )
    if recorded not in (None, model_id):
        log.warning(
            "the embedding model changed: the next full pass indexes the vault into a new "
            "collection; the old one is dropped once it completes",
            previous=recorded,
            model=model_id,
        )
        # Its tokenizer cuts other chunks: every note is chunked again (and stays searchable
        # by its words meanwhile); a switch back finds its vectors by the same texts.
        manifest.notes.rechunk()
    if recorded != model_id:
        manifest.set_meta(MODEL_META, model_id)
    if dimensions != str(width):
        manifest.set_meta(DIMENSIONS_META, str(width))


def _measured(manifest: Manifest, discovery: Discovery) -> Languages:
    """The vault's languages, measured now and recorded (status reports them)."""
    languages = measure(sample(discovery))
    manifest.set_meta(LANGUAGES_META, json.dumps(languages.as_dict()))
    return languages


def _make_private(data_dir: Path) -> None:
    fixed = tighten(data_dir)
    if fixed:
        log.warning(
            "made the data directory owner-only: other users could read or write these",
            count=len(fixed),
            paths=[entry.describe() for entry in fixed[:10]],
        )


def installed_chromadb() -> str:
    return metadata.version("chromadb")


def _is_newer(recorded: str, installed: str) -> bool:
    try:
        return Version(recorded) > Version(installed)
    except InvalidVersion:
        # Not a version chromadb ever had: nothing to compare, and the record is rewritten
        # once this chromadb has opened the store.
        log.warning("unreadable chromadb version in the manifest", recorded=recorded)
        return False


def _check_chromadb(manifest: Manifest, chroma_dir: Path, installed: str) -> None:
    """Refuse a store last opened by a newer chromadb, before anything (the probe included)
    opens it: Chroma migrates forward only."""
    recorded = manifest.get_meta(CHROMADB_META)
    if recorded is None or not (chroma_dir / CHROMA_DATABASE).exists():
        return
    if _is_newer(recorded, installed):
        raise StoreMismatchError(
            f"the vector store {chroma_dir} was last written by chromadb {recorded}, newer "
            f"than the installed chromadb {installed}, which cannot read it safely (Chroma "
            "only migrates forward). Upgrade vaultd to the release that installed chromadb "
            f"{recorded}, or move the store aside (mv {chroma_dir} {chroma_dir}.newer): "
            "vaultd then rebuilds it from its manifest without embedding anything"
        )


def _record_chromadb(manifest: Manifest, installed: str) -> None:
    """Called once the store is open: this chromadb has migrated it to its own version."""
    recorded = manifest.get_meta(CHROMADB_META)
    if recorded == installed:
        return
    if recorded is not None:
        log.info("the vector store was migrated forward", chromadb=installed, previous=recorded)
    manifest.set_meta(CHROMADB_META, installed)


def _upkeep(manifest: Manifest, store: VectorStore, model_id: str) -> None:
    """After a complete full pass: finish a switch of model, compact a bloated store.

    A failure here loses nothing (the next full pass tries again), so it is logged, not raised.
    """
    try:
        dropped = store.upkeep.drop_retired()
        forgotten = manifest.vectors.forget_other_models(model_id)
        if dropped or forgotten:
            log.info(
                "the switch of embedding model is complete",
                model=model_id,
                collections_dropped=dropped,
                vectors_forgotten=forgotten,
            )
        store.upkeep.compact_if_bloated()
    except StoreError as exc:
        log.error("store upkeep failed; it is tried again after the next full pass", error=str(exc))


def _take(stack: ExitStack, data_dir: Path, holder: Holder) -> None:
    """Lock the data directory for this process (as `holder`) until `stack` closes, and check
    that this process can write in it."""
    lock = DataDirLock(data_dir, holder)
    lock.acquire()
    stack.callback(lock.release)
    # Last before the lock goes, once the store has flushed: what Chroma wrote meanwhile
    # under a library caller's umask (the CLI's is 077) is made owner-only too.
    stack.callback(_make_private, data_dir)
    # The lock file may be there from before while the directory is no longer writable:
    # say so now, not when the manifest's first write fails.
    if not os.access(data_dir, os.W_OK | os.X_OK):
        raise unusable(data_dir, "not writable by you", errno.EACCES)


def _check_chroma_dir(
    stack: ExitStack, manifest: Manifest, data_dir: Path, chromadb_version: str
) -> None:
    """Before the embedded store opens: the chromadb that wrote it, a probe after an unclean
    end, its log's pruning; then it is marked open until `stack` closes."""
    _check_chromadb(manifest, data_dir / CHROMA, chromadb_version)
    check_store(data_dir, data_dir / CHROMA)
    enable_log_pruning(data_dir / CHROMA)
    mark_open(data_dir)
    stack.callback(mark_closed, data_dir, data_dir / CHROMA)


def _models(
    config: Config, env: Mapping[str, str], manifest: Manifest, discovery: Discovery
) -> tuple[ModelSpec, ModelSpec | None]:
    """The model that serves the vault, and the English one when it is a pair's."""
    model = config.embedding.model
    if model == "auto":
        model = choose(
            manifest.get_meta(MODEL_META) if manifest.counts()["chunks"] else None,
            lambda: _measured(manifest, discovery),
        )
    precision, cache = config.embedding.precision, cache_dir(env)
    spec = derived_spec(load_spec(model), precision, cache)
    english = derived_spec(load_spec(spec.english), precision, cache) if spec.english else None
    return spec, english


def _start_loading(
    stack: ExitStack,
    config: Config,
    spec: ModelSpec,
    english: ModelSpec | None,
    run_tokens: int,
) -> Callable[[], TextEmbedder]:
    """Start loading the model (and a pair's English one) on a thread of its own, stopped
    when `stack` closes; the function returned waits for the embedder."""

    def load(one: ModelSpec) -> Embedder:
        return Embedder(
            one,
            threads=config.embedding.threads,
            batch_size=config.embedding.batch_size,
            max_batch_tokens=run_tokens,
        )

    loader = stack.enter_context(ThreadPoolExecutor(1, thread_name_prefix="vaultd-model"))
    loading = loader.submit(load, spec)
    loading_english = loader.submit(load, english) if english else None

    def loaded() -> TextEmbedder:
        if loading_english is None:
            return loading.result()
        return PairedEmbedder(
            loading.result(),
            loading_english.result(),
            reads_english=reads_english,
            latin_query=latin_query,
        )

    return loaded


def _indexer(
    config: Config,
    vault: Path,
    discovery: Discovery,
    manifest: Manifest,
    store: VectorStore,
    embedder: TextEmbedder,
    spec: ModelSpec,
    model_id: str,
    pacing: Pacing | None,
    on_note: Callable[..., None] | None,
) -> Indexer:
    counter = TokenCounter.for_spec(spec)
    settings = PassSettings(
        max_tokens=chunk_budget(config.chunking.max_tokens, spec, counter),
        max_bytes=int(config.vault.max_file_mb * 1024 * 1024),
        extraction=Extraction.from_config(config.attachments, config.chunking),
        pacing=pacing or Pacing(),
    )
    return Indexer(
        root=vault,
        discovery=discovery,
        manifest=manifest,
        store=store,
        embedder=embedder,
        counter=counter,
        settings=settings,
        # Only a complete full pass proves the current collection holds the whole vault.
        after_full_pass=lambda: _upkeep(manifest, store, model_id),
        # The process's own environment, whatever `env` the caller passes: test hooks.
        faults=Faults.from_env(),
        parsers=lambda: ParserPool(
            spec,
            max_bytes=settings.max_bytes,
            max_tokens=settings.max_tokens,
            extraction=settings.extraction,
        ),
        on_note=on_note,
    )


@contextmanager
def open_index(
    config: Config,
    env: Mapping[str, str] | None = None,
    *,
    holder: Holder = Holder.INDEX,
    create: bool = True,
    pacing: Pacing | None = None,
    run_tokens: int = 0,
    on_note: Callable[..., None] | None = None,
) -> Iterator[Index]:
    """Lock the data directory and open the manifest, the store and the model.

    `holder` is what this process is, written into the lock file for whoever finds it taken:
    a daemon starting meanwhile waits for a reader (a query, status), not for an index run.

    With `create=False` (the commands that only read: search, status, export) a vault that
    was never indexed raises NotIndexedError before anything is created: an empty data
    directory would answer "no hits" as if the vault held nothing. `pacing` (how a pass is cut
    up) and `run_tokens` (padded tokens per embedding run, 0: no cap) are the daemon's pacing;
    a one-off `vaultd index` keeps the defaults. `on_note` is told of each note indexed,
    failed or deleted (the daemon's event stream).
    """
    env = os.environ if env is None else env
    vault = config.require_vault()
    data_dir = config.require_store()
    if not create and not (data_dir / MANIFEST).is_file():
        raise NotIndexedError(str(vault), str(data_dir))
    # Chroma's SQLite puts temporary files in /tmp by default; keep them on the data disk.
    os.environ.setdefault("SQLITE_TMPDIR", str(data_dir))
    embedded = not config.store.url
    chromadb_version = installed_chromadb()
    with ExitStack() as stack:
        _take(stack, data_dir, holder)
        manifest = Manifest(data_dir, quarantine_after=config.vault.quarantine_after)
        stack.callback(manifest.close)
        _check_owner(manifest, vault)
        discovery = Discovery(vault, IgnoreRules.from_config(config.vault, config.attachments))
        spec, english = _models(config, env, manifest, discovery)
        model_id = spec.id if english is None else paired_id(spec.id, english.id)
        width = spec.dimensions + (english.dimensions if english else 0)
        # The model loads (mostly outside the GIL) while chromadb is imported and opened:
        # a third of a second off every start.
        loaded = _start_loading(stack, config, spec, english, run_tokens)
        _check_model(manifest, model_id, width)
        if embedded:
            _check_chroma_dir(stack, manifest, data_dir, chromadb_version)
        store = VectorStore(
            collection=config.store.collection or collection_name(vault, model_id),
            vault_id=str(vault),
            model_id=model_id,
            space="cosine" if english is None else "ip",
            path=None if config.store.url else data_dir / CHROMA,
            url=config.store.url,
            token=env.get(config.store.token_env, ""),
        )
        stack.callback(store.close)
        embedder = loaded()
        if embedded:
            _record_chromadb(manifest, chromadb_version)
        # Everything in it is the vault's text in one form or another. The CLI runs with umask
        # 077; this catches what an older version, a library caller or a restore left open.
        _make_private(data_dir)
        indexer = _indexer(
            config, vault, discovery, manifest, store, embedder, spec, model_id, pacing, on_note
        )
        stack.callback(close_children)  # the extraction workers (PDFs) this index started
        # Before the store closes (callbacks run last-in first-out): the writer writes to it.
        stack.callback(indexer.writer.close)
        yield Index(
            config=config,
            vault=vault,
            data_dir=data_dir,
            manifest=manifest,
            store=store,
            embedder=embedder,
            indexer=indexer,
            searcher=Searcher(manifest, store, embedder, config.search),
            related=RelatedNotes(manifest, store, model_id),
        )
