"""The one place the stages meet: discover → detect → parse → chunk → embed → store.

The indexer owns ordering; each phase of a pass is a module of its own:
- `detection`: work is spent only on what changed: stat first, hash second, embed only texts
  no vector is stored for (the manifest keeps every vector by the hash of the text it
  embeds). Files that are no note vaultd can index are recorded as left out, not failed.
- Every pass has two phases. The keyword phase (`keyword_phase`, reading and parsing in
  `prepare`) reads, parses and chunks each new or changed note and commits it to the
  manifest, and so to the keyword index, at once: a chunk whose text has a stored vector is
  published to Chroma with it, the others await vectors. The embedding phase
  (`embedding_phase`) then embeds what awaits, the most recently modified notes first (a
  watched edit's pass embeds its own notes at once), and publishes each chunk as its vector
  comes.
- `store_sync`: Chroma is written first and the manifest second, so the store never holds a
  chunk the manifest lacks; a crash in between is repaired from the manifest at the next pass.
- `outcomes`: one bad note is recorded as failed with its reason and never stops the run.
  After `quarantine_after` failures on the same content it is quarantined: skipped until its
  content changes or it is asked for by name (`retry`), its last good chunks still searchable.
- The manifest's `failures` (`vaultd.storage.quarantine`): a note that kills the whole process
  is found from the notes in flight when it died, tried last and one at a time.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from dataclasses import asdict
from pathlib import Path

import structlog

from vaultd import logs
from vaultd.embedding.embedder import TextEmbedder
from vaultd.embedding.tokens import TokenCounter
from vaultd.faults import Faults
from vaultd.index.detection import Detection, Reader
from vaultd.index.embedding_phase import EmbeddingPhase
from vaultd.index.keyword_phase import KeywordPhase
from vaultd.index.outcomes import Outcomes, Summary
from vaultd.index.packages import Packages
from vaultd.index.parsers import ParserPool
from vaultd.index.passes import (
    BATCH_CHUNKS,
    COMMIT_CHUNKS,
    COMMIT_SECONDS,
    PassSettings,
    PausePoint,
    Pauses,
    Progress,
    quiet,
)
from vaultd.index.prepare import Preparer
from vaultd.index.store_sync import StoreSync
from vaultd.index.writer import Writer
from vaultd.pipeline.detect import due_for_check, trusted
from vaultd.pipeline.discover import Discovery
from vaultd.records import FileState, KnownNote
from vaultd.storage.manifest import Manifest
from vaultd.storage.vectors import VectorStore

log = structlog.get_logger(__name__)


class Indexer:
    """Runs passes: each phase is made here with the parts it uses, and the loop of a pass
    (`_reconcile`) hands each phase's results to the next and adds up their summaries."""

    def __init__(
        self,
        *,
        root: Path,
        discovery: Discovery,
        manifest: Manifest,
        store: VectorStore,
        embedder: TextEmbedder,
        counter: TokenCounter,
        settings: PassSettings,
        faults: Faults | None = None,
        after_full_pass: Callable[[], None] | None = None,
        parsers: Callable[[], ParserPool] | None = None,
        on_note: Callable[..., None] | None = None,
    ) -> None:
        self.root = root
        self.discovery = discovery
        self.manifest = manifest
        self.store = store
        self.embedder = embedder
        #: How the passes read, chunk and pace, fixed for the indexer's life.
        self.settings = settings
        # Test fault hooks, read from the environment by the composition root.
        faults = faults if faults is not None else Faults()
        #: Writes records to the store while the model embeds; closed with the indexer.
        self.writer = Writer(store, embedder.passage_metadata)
        self.outcomes = Outcomes(manifest, on_note)
        self.pauses = Pauses()
        self.sync = StoreSync(manifest, store, embedder)
        self.reader = Reader(root, discovery)
        self.detection = Detection(
            discovery=discovery,
            reader=self.reader,
            manifest=manifest,
            store=store,
            outcomes=self.outcomes,
            pauses=self.pauses,
        )
        #: Each source file's package: named as it is written, re-attributed when a manifest
        #: changes and after every full pass.
        self.packages = Packages(discovery, manifest)
        #: Reads, parses and chunks the keyword phase's notes (`status` names its file).
        self.preparer = Preparer(
            reader=self.reader,
            notes=manifest.notes,
            vectors=manifest.vectors,
            failures=manifest.failures,
            counter=counter,
            model_id=embedder.model_id,
            settings=settings,
            faults=faults,
        )
        self.keyword = KeywordPhase(
            manifest=manifest,
            store=store,
            writer=self.writer,
            sync=self.sync,
            preparer=self.preparer,
            packages=self.packages,
            discovery=discovery,
            outcomes=self.outcomes,
            pauses=self.pauses,
            model_id=embedder.model_id,
        )
        self.embedding = EmbeddingPhase(
            manifest=manifest,
            embedder=embedder,
            writer=self.writer,
            outcomes=self.outcomes,
            pauses=self.pauses,
            faults=faults,
            pacing=settings.pacing,
        )
        #: Upkeep that needs the whole vault seen: called at the end of every full pass.
        self._after_full_pass = after_full_pass
        #: Starts worker processes that parse and chunk, for a pass with
        #: `settings.pacing.pool_above` notes or more to read (None: always in this process).
        self._parsers = parsers
        self._pool: ParserPool | None = None
        self._pools_cpu = 0.0

    # -- what the daemon, the CLI and the benchmarks read --------------------------------------

    @property
    def found(self) -> int | None:
        """Note files in the vault, as the walks found them (None before a full walk)."""
        found = self.detection.found
        return None if found is None else len(found)

    @property
    def model_id(self) -> str:
        return self.embedder.model_id

    @property
    def reads(self) -> int:
        """Note files read since start (to hash or to parse)."""
        return self.reader.reads

    @property
    def vectors_made(self) -> int:
        """Texts the model embedded since start (see `EmbeddingPhase.vectors_made`)."""
        return self.embedding.vectors_made

    @property
    def helper_cpu(self) -> float:
        """CPU seconds the parser's worker processes have used, for the daemon's pacing."""
        return self._pools_cpu + (self._pool.cpu_seconds if self._pool is not None else 0.0)

    # -- the whole pass ------------------------------------------------------------------------

    def reconcile(
        self,
        progress: Progress | None = None,
        *,
        pause: PausePoint | None = None,
        check: float = 0.0,
    ) -> Summary:
        """Bring the store in line with the whole vault on disk; return what it took.

        `pause` is called between two batches and between two embedding runs inside a batch,
        so that a fresh edit waits for one ONNX run, not for a whole batch. `check` is the
        share of the indexed notes (those hashed longest ago) read whatever their stat says
        (1: all of them).
        """
        with self.pauses.during(pause):
            return self._reconcile_all(progress, check)

    def _reconcile_all(self, progress: Progress | None, check: float) -> Summary:
        self.manifest.failures.start_pass()
        repaired = self.sync_store()
        known = self.manifest.notes.known()
        (progress or quiet)("scan", 0, 0)
        verify = due_for_check(known, check)
        summary = self._reconcile(known, self.discovery.walk(), progress, verify=verify)
        # A manifest may have changed while nothing watched (or before schema 11 recorded
        # packages): every source file's package is named again, each manifest read once.
        self.packages.refresh()
        summary.store_repaired = repaired
        self.manifest.vectors.prune(self.model_id)
        # Every suspect still on disk was tried in this pass, or is as last recorded.
        self.manifest.failures.end_full_pass()
        if self._after_full_pass is not None:
            self._after_full_pass()
        return summary

    def retry(self, paths: Iterable[str]) -> None:
        """The user asked for these notes by name: quarantined ones get one more try at the
        start of the next pass (thread-safe; the pass runs on the indexing thread)."""
        self.manifest.failures.retry(paths)

    def is_current(self, path: str) -> bool:
        """Whether the manifest holds exactly what the file holds now (or knows it is gone):
        what a client waiting for its edit to be searchable waits for."""
        state = self.discovery.state_of(path)
        known = self.manifest.notes.known_subset([path], []).get(path)
        if state is None:
            return known is None
        if known is None:
            return False
        if known.ok and self.manifest.vectors.awaiting_paths(self.model_id, [path]):
            return False  # searchable by its words, not yet by its meaning
        if trusted(known, state):
            return True
        try:
            data, _ = self.discovery.read_note(path)
        except OSError:
            return False
        return hashlib.sha256(data).hexdigest() == known.sha256

    def reconcile_paths(
        self,
        paths: Iterable[str],
        dirs: Iterable[str] = (),
        progress: Progress | None = None,
        *,
        pause: PausePoint | None = None,
        verify: Iterable[str] = (),
    ) -> Summary:
        """Compare only these notes and folders with the manifest (what the watcher saw).

        The notes in `verify` (named by the user) are read whatever their stat says.
        """
        with self.pauses.during(pause):
            return self._reconcile_some(paths, dirs, progress, set(verify))

    def _reconcile_some(
        self,
        paths: Iterable[str],
        dirs: Iterable[str],
        progress: Progress | None,
        verify: set[str],
    ) -> Summary:
        paths, dirs = set(paths) | verify, set(dirs)
        self.manifest.failures.start_pass()
        known = self.manifest.notes.known_subset(paths, dirs)

        def states() -> Iterable[FileState]:
            seen: set[str] = set()
            for folder in sorted(dirs):
                for state in self.discovery.walk_under(folder):
                    if state.path not in seen:
                        seen.add(state.path)
                        yield state
            for path in sorted(paths - seen):
                single = self.discovery.state_of(path)
                if single is not None:
                    yield single

        summary = self._reconcile(known, states(), progress, embed=paths, verify=verify)
        # A manifest saved, created, deleted or moved: its files change package, not text.
        self.packages.changed(paths)
        return summary

    def _reconcile(
        self,
        known: Mapping[str, KnownNote],
        walk: Iterable[FileState],
        progress: Progress | None,
        embed: Iterable[str] | None = None,
        verify: Container[str] = frozenset(),
    ) -> Summary:
        """Both phases over `walk`; the embedding phase takes every chunk awaiting vectors, or
        (with `embed`) those of the notes written now and of `embed`. The notes in `verify`
        are read whatever their stat says. Returns the phases' summaries added up."""
        started = time.perf_counter()
        embedded_before = self.embedder.embedded
        reads_before = self.reads
        self.packages.begin()
        report = progress or quiet
        scanned = self.detection.scan(known, walk, full=embed is None, verify=verify)
        with self._parser_pool(len(scanned.scan.candidates)) as pool:
            hashed = self.detection.hash(scanned.scan, known, report)
            written = self.keyword.apply(
                hashed.changes, report, hashed.weights, pool=pool, read=hashed.kept
            )
        self.detection.forgotten(scanned.went)
        keyword_seconds = time.perf_counter() - started
        embedded = self.embedding.run(report, None if embed is None else {*written.paths, *embed})
        if embedded.rechunk:
            # A pass of their own, reported with this one's counts of reads and vectors.
            self._reconcile_some(embedded.rechunk, (), None, set())

        summary = scanned.summary + hashed.summary + written.summary + embedded.summary
        summary.keyword_seconds = keyword_seconds
        summary.chunks_embedded = self.embedder.embedded - embedded_before
        summary.notes_read = self.reads - reads_before
        summary.seconds = time.perf_counter() - started
        counted = (summary.notes_changed, summary.notes_moved, summary.notes_touched)
        if any(counted) or summary.notes_deleted or summary.notes_failed:
            counts = {k: v for k, v in asdict(summary).items() if type(v) is int and v}
            log.info(
                "reconciled",
                **logs.notes({*written.paths, *scanned.scan.gone}),
                **counts,
                ms=logs.ms(summary.seconds),
                keyword_ms=logs.ms(summary.keyword_seconds),
            )
        return summary

    @contextlib.contextmanager
    def _parser_pool(self, notes: int) -> Iterator[ParserPool | None]:
        """Worker processes to parse `notes` notes, if that many are worth them. Started
        before the hashing, so that the workers load meanwhile."""
        pool_above = self.settings.pacing.pool_above
        if self._parsers is None or notes < pool_above or self._pool is not None:
            yield None
            return
        with self._parsers() as pool:
            self._pool = pool
            try:
                yield pool
            finally:
                self._pool = None
                self._pools_cpu += pool.cpu_seconds

    def sync_store(self) -> int:
        """Repair the store from the manifest (see `StoreSync.sync`); how many records."""
        return self.sync.sync()


__all__ = [
    "BATCH_CHUNKS",
    "COMMIT_CHUNKS",
    "COMMIT_SECONDS",
    "Indexer",
    "Progress",
    "Summary",
]
