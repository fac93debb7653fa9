"""The one place the stages meet: discover → detect → parse → chunk → embed → store.

The indexer owns ordering and bookkeeping. Its rules:
- Work is spent only on what changed: stat first, hash second, embed only texts no vector is
  stored for (the manifest keeps every vector by the hash of the text it embeds). A stat is
  trusted only as `pipeline/detect.py` says (not within a timestamp tick of its hash), and a
  full pass may ask for a share of the vault to be hashed whatever its stat says.
- Every pass has two phases. The keyword phase reads, parses and chunks each new or changed
  note and commits it to the manifest, and so to the keyword index, at once: a chunk whose
  text has a stored vector is published to Chroma with it, the others await vectors. The
  embedding phase then embeds what awaits, the most recently modified notes first (a watched
  edit's pass embeds its own notes at once), and publishes each chunk as its vector comes.
  A note is indexed when none of its chunks awaits. A chunk awaits exactly while the manifest
  holds no vector of the model for its text: there is no other mark to keep in step.
- Chroma is written first and the manifest second, so the store never holds a chunk the
  manifest lacks; a crash in between is repaired from the manifest at the next pass
  (`sync_store`: Chroma holds exactly the chunks with a stored vector).
- One bad note is recorded as failed with its reason and never stops the run. After
  `quarantine_after` failures on the same content it is quarantined: skipped until its content
  changes or it is asked for by name (`retry`), its last good chunks still searchable.
- A file that is no note vaultd can index (over `max_file_mb`, binary, not UTF-8 text,
  unreadable) is recorded as left out, not failed: logged once per path and kind, listed, never
  quarantined, and retried on every pass; it leaves the list when it is fixed or deleted.
- A note that kills the whole process (a native crash, an OOM kill) leaves its row in the
  manifest's in-flight table. The next process makes every note found there a suspect (not a
  failure: most were only in hand when something else killed the process) and tries suspects
  last and one at a time, so the one that really crashes is found, reported, quarantined, and
  the rest of the vault is indexed meanwhile.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import structlog

from vaultd import logs
from vaultd.config import QUARANTINE_AFTER
from vaultd.embedding.embedder import TextEmbedder
from vaultd.embedding.tokens import TokenCounter
from vaultd.errors import EmbedError, LeftOutError, NoteError, NoteUnavailableError, StoreError
from vaultd.faults import Faults
from vaultd.index.extract import Extraction
from vaultd.index.parsers import POOL_ABOVE, Parsed, ParserPool, parse_and_chunk
from vaultd.index.writer import Record, Writer
from vaultd.pipeline.chunk import chunk_id
from vaultd.pipeline.detect import Scan, classify, due_for_check, keep_unreadable, scan, trusted
from vaultd.pipeline.discover import Discovery, file_state
from vaultd.progress import text_weight
from vaultd.records import (
    NOWHERE,
    Change,
    Chunk,
    FileState,
    KnownNote,
    Location,
    Note,
    NoteFailed,
    NoteLeftOut,
    NoteWritten,
    kind_of,
)
from vaultd.storage.manifest import Manifest, StoredChunk, tag_ancestors
from vaultd.storage.vectors import Metadata, VectorStore

log = structlog.get_logger(__name__)


def _quiet(phase: str, done: int, total: int) -> None:
    pass


#: Progress callback: (phase, done, total); total 0 means unknown.
Progress = Callable[[str, int, int], None]

#: A batch is embedded (sorted by length, so padding stays small) and flushed to the store once
#: it holds this many chunks or notes. Big batches pad least: on obsidian-hub, 4,096 chunks
#: pad 0.7% over the texts' own tokens, 1,024 chunks 2.1%, 128 chunks 19%. The daemon uses
#: smaller ones (`Indexer.batch_chunks`) so that less work is redone after a crash and a note
#: in flight is not held back long.
BATCH_CHUNKS = 4096
BATCH_NOTES = 1024
#: Inside a batch, the vectors embedded are recorded (with their records in the store) once
#: this many texts or seconds of embedding have passed, whichever comes first: a stopped or
#: killed first index keeps all but the last few seconds of its work. Measured to cost nothing
#: measurable on a first index (bench/commit_cadence.py, docs/benchmarks.md).
COMMIT_CHUNKS = 256
COMMIT_SECONDS = 2.0
#: The keyword phase commits this many chunks at a time: nothing is embedded there, so a
#: batch is a second or two of parsing, and fewer commits cost less.
KEYWORD_BATCH_CHUNKS = 4096
#: The kinds read in the extraction worker: bulk work of seconds a file (see `apply`).
EXTRACTED_KINDS = frozenset({"pdf", "image"})
#: Bytes of notes kept from the hashing for the parser in one pass (more are read again).
KEEP_READ_BYTES = 64 << 20
#: Notes marked in flight in one commit when a pool parses (in process, one at a time).
MARK_GROUP = 32
#: The longest stretch of hashing without a call to `between_batches`.
PAUSE_EVERY = 0.25


#: A note that could not be indexed.
_Failed = NoteFailed | NoteLeftOut


def _failure(state: FileState, sha256: str, reason: str, kind: str) -> _Failed:
    """A failure, or a file left out when there is a `kind` of file it is."""
    return NoteLeftOut(state, sha256, kind, reason) if kind else NoteFailed(state, sha256, reason)


#: Called at safe points of a long pass with the notes of the batch in flight (read, not yet
#: written); the daemon serves fresh edits of other notes there, and may raise to abandon the
#: pass (the work committed so far stays).
PausePoint = Callable[[frozenset[str]], None]


@dataclass(slots=True)
class Summary:
    """What one reconcile did; `vaultd index --json` prints it."""

    notes_seen: int = 0
    notes_unchanged: int = 0
    #: Notes read though their stat was as recorded: too close to their last hash to prove
    #: anything, due a check in a full pass, or named by the user (`verify`).
    notes_checked: int = 0
    notes_touched: int = 0
    notes_changed: int = 0
    notes_moved: int = 0
    notes_deleted: int = 0
    notes_failed: int = 0
    #: Files that are no note vaultd can index (too big, binary, not UTF-8, unreadable).
    notes_left_out: int = 0
    #: Files whose content was read (to hash or to parse); an unchanged vault reads none.
    notes_read: int = 0
    chunks_embedded: int = 0
    #: Chunks published with a vector stored before (unchanged text, a move, a copy).
    chunks_reused: int = 0
    chunks_deleted: int = 0
    store_repaired: int = 0
    seconds: float = 0.0
    #: When the keyword phase ended: every note of the pass searchable by its words.
    keyword_seconds: float = 0.0
    failures: list[dict[str, str]] = field(default_factory=list)
    left_out: list[dict[str, str]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["seconds"] = round(self.seconds, 3)
        out["keyword_seconds"] = round(self.keyword_seconds, 3)
        return out


@dataclass(slots=True)
class _Pending:
    """A note parsed and chunked, waiting for vectors and the write."""

    change: Change
    note: Note
    chunks: list[Chunk]
    #: The chunks recorded at its path, and at the path it moved from.
    old_ids: list[str]
    moved_ids: list[str]
    #: Vectors looked up already for its chunks' texts (a move's), by text hash.
    vectors: dict[str, np.ndarray]


#: A note's bytes with the stat they were read under (and when).
_Read = tuple[bytes, FileState]


@dataclass(slots=True)
class _Loaded:
    """A note's bytes as read for parsing, with the stat they were read under; or why they
    could not be read."""

    change: Change
    data: bytes = b""
    state: FileState | None = None
    sha256: str = ""
    failure: _Failed | None = None

    @property
    def job(self) -> tuple[str, bytes] | None:
        return None if self.failure is not None else (self.change.path, self.data)


#: The manifest's meta key for the last full walk's count of files of kinds not indexed.
NOT_INDEXED_META = "not_indexed"


def sha256_file(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def chunk_metadata(
    *,
    path: str,
    title: str,
    tags: Sequence[str],
    aliases: Sequence[str],
    link_targets: Iterable[str],
    section: str,
    headings: Sequence[str],
    index: int,
    start_line: int,
    end_line: int,
    mtime_ns: int,
    sha256: str,
    model_id: str,
    kind: str = "note",
    location: Location = NOWHERE,
) -> Metadata:
    """The metadata stored with each chunk in Chroma; empty lists and unset locations are
    left out (Chroma rejects None and empty lists). `link_targets` are the chunk's own (see
    `links_within`)."""
    folders = PurePosixPath(path).parent.parts
    meta: dict[str, Any] = {
        "path": path,
        "title": title,
        "section": section,
        "headings": " > ".join(headings),
        "index": index,
        "start_line": start_line,
        "end_line": end_line,
        "mtime": mtime_ns / 1e9,
        "note_hash": sha256,
        "model": model_id,
        "kind": kind,
        **location.as_json(),
    }
    lists = {
        "tags": list(tags),
        "tag_paths": sorted(tag_ancestors(tags)),
        "folders": ["/".join(folders[: i + 1]) for i in range(len(folders))],
        "aliases": list(aliases),
        "links": sorted(set(link_targets)),
    }
    meta.update({k: v for k, v in lists.items() if v})
    return meta


def links_within(
    links: Iterable[tuple[str, int | None]], start_line: int, end_line: int
) -> list[str]:
    """Targets of the links written in these lines, and of the front matter's (line None).

    A chunk carries its own links, not its note's: a hub note links hundreds of notes, and
    Chroma stores a list value as one row per item for every record, so the note's links on
    each of its chunks made most of the store's size and write time.
    """
    return [t for t, line in links if line is None or start_line <= line <= end_line]


class Indexer:
    def __init__(
        self,
        *,
        root: Path,
        discovery: Discovery,
        manifest: Manifest,
        store: VectorStore,
        embedder: TextEmbedder,
        counter: TokenCounter,
        max_tokens: int,
        max_bytes: int,
        extraction: Extraction | None = None,
        quarantine_after: int = QUARANTINE_AFTER,
        batch_chunks: int = BATCH_CHUNKS,
        faults: Faults | None = None,
        after_full_pass: Callable[[], None] | None = None,
        parsers: Callable[[], ParserPool] | None = None,
        pool_above: int = POOL_ABOVE,
        commit_chunks: int = COMMIT_CHUNKS,
        commit_seconds: float = COMMIT_SECONDS,
    ) -> None:
        self.root = root
        self.discovery = discovery
        self.manifest = manifest
        self.store = store
        self.embedder = embedder
        self.counter = counter
        self.max_tokens = max_tokens
        self.max_bytes = max_bytes
        #: How files other than notes are read (their kinds, the extraction worker's limits).
        self.extraction = extraction or Extraction()
        self.batch_chunks = batch_chunks
        #: How often a batch records the vectors embedded so far (see COMMIT_CHUNKS).
        self.commit_chunks = commit_chunks
        self.commit_seconds = commit_seconds
        #: Writes records to the store while the model embeds; closed with the indexer.
        self.writer = Writer(store, embedder.passage_metadata)
        #: Texts the model embedded since start, counted as each run ends (a pass stopped
        #: midway reports them; `Summary.chunks_embedded` counts passes that ended).
        self.vectors_made = 0
        #: Note files read since start (to hash or to parse); status and benchmarks report it.
        self.reads = 0
        #: The note files the last full walk found (None before one), kept current by the
        #: passes since: status reports how many.
        self._found: set[str] | None = None
        #: The pass in hand's pause point (see `reconcile`).
        self._between_batches: PausePoint | None = None
        self._last_pause = 0.0
        #: Failures on the same content after which a note is quarantined.
        self.quarantine_after = quarantine_after
        #: Test fault hooks, read from the environment by the composition root.
        self.faults = faults if faults is not None else Faults()
        #: Upkeep that needs the whole vault seen: called at the end of every full pass.
        self._after_full_pass = after_full_pass
        self._recovered = False
        #: Notes in flight when the last process died, to be tried one at a time.
        self._suspects: set[str] = set()
        self._retry: set[str] = set()
        self._retry_lock = threading.Lock()
        #: Starts worker processes that parse and chunk, for a pass with `pool_above` notes
        #: or more to read (None: always in this process).
        self._parsers = parsers
        self.pool_above = pool_above
        self._pool: ParserPool | None = None
        self._pools_cpu = 0.0
        #: Told of each note indexed, failed or deleted, as `(kind, path=..., ...)`: the
        #: daemon's event stream (vaultd.daemon.events). Must not block.
        self.on_note: Callable[..., None] | None = None

    @property
    def found(self) -> int | None:
        """Note files in the vault, as the walks found them (None before a full walk)."""
        return None if self._found is None else len(self._found)

    @property
    def model_id(self) -> str:
        return self.embedder.model_id

    # -- the whole pass ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _pausing(self, pause: PausePoint | None) -> Iterator[None]:
        # Passes nest: a fresh edit is served by a pass run from the outer pass's pause point.
        # The outer pass must get its pause point back, or it serves no edit after the first.
        outer = self._between_batches
        self._between_batches = pause
        try:
            yield
        finally:
            self._between_batches = outer

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
        with self._pausing(pause):
            return self._reconcile_all(progress, check)

    def _reconcile_all(self, progress: Progress | None, check: float) -> Summary:
        summary = Summary()
        self._start_pass()
        repaired = self.sync_store()
        known = self.manifest.known()
        (progress or _quiet)("scan", 0, 0)
        verify = due_for_check(known, check)
        self._reconcile(known, self.discovery.walk(), summary, progress, verify=verify)
        summary.store_repaired = repaired
        self.manifest.prune_vectors(self.model_id)
        # Every suspect still on disk was tried in this pass, or is as last recorded.
        self._suspects.clear()
        self.manifest.clear_suspects()
        if self._after_full_pass is not None:
            self._after_full_pass()
        return summary

    def retry(self, paths: Iterable[str]) -> None:
        """The user asked for these notes by name: quarantined ones get one more try at the
        start of the next pass (thread-safe; the pass runs on the indexing thread)."""
        with self._retry_lock:
            self._retry.update(paths)

    def is_current(self, path: str) -> bool:
        """Whether the manifest holds exactly what the file holds now (or knows it is gone):
        what a client waiting for its edit to be searchable waits for."""
        state = self.discovery.state_of(path)
        known = self.manifest.known_subset([path], []).get(path)
        if state is None:
            return known is None
        if known is None:
            return False
        if known.ok and self.manifest.awaiting_paths(self.model_id, [path]):
            return False  # searchable by its words, not yet by its meaning
        if trusted(known, state):
            return True
        try:
            data, _ = self.discovery.read_note(path)
        except OSError:
            return False
        return hashlib.sha256(data).hexdigest() == known.sha256

    def _start_pass(self) -> None:
        if not self._recovered:
            self._recovered = True
            self._recover_in_flight()
        with self._retry_lock:
            wanted, self._retry = self._retry, set()
        if wanted:
            released = self.manifest.release(sorted(wanted))
            if released:
                log.info("quarantined notes released for one more try", paths=released)

    def _recover_in_flight(self) -> None:
        """Notes the last process died holding: suspects, tried one at a time."""
        outcomes = self.manifest.recover_in_flight(self.quarantine_after)
        if outcomes:
            log.warning(
                "the last run died while indexing these notes; trying them one at a time",
                paths=[path for path, *_ in outcomes],
            )
        for path, crashes, failed, quarantined in outcomes:
            if quarantined:
                log.error("note quarantined: it crashed the indexer", path=path, crashes=crashes)
            elif failed:
                log.error("note failed: it crashed the indexer alone", path=path, crashes=crashes)
        # Suspects of earlier deaths too: a process that died before trying them alone.
        self._suspects = set(self.manifest.suspects())

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
        with self._pausing(pause):
            return self._reconcile_some(paths, dirs, progress, set(verify))

    def _reconcile_some(
        self,
        paths: Iterable[str],
        dirs: Iterable[str],
        progress: Progress | None,
        verify: set[str],
    ) -> Summary:
        paths, dirs = set(paths) | verify, set(dirs)
        self._start_pass()
        known = self.manifest.known_subset(paths, dirs)

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

        summary = Summary()
        self._reconcile(known, states(), summary, progress, embed=paths, verify=verify)
        return summary

    def _reconcile(
        self,
        known: Mapping[str, KnownNote],
        walk: Iterable[FileState],
        summary: Summary,
        progress: Progress | None,
        embed: Iterable[str] | None = None,
        verify: Container[str] = frozenset(),
    ) -> None:
        """Both phases over `walk`; the embedding phase takes every chunk awaiting vectors, or
        (with `embed`) those of the notes written now and of `embed`. The notes in `verify`
        are read whatever their stat says."""
        started = time.perf_counter()
        embedded_before = self.embedder.embedded
        reads_before = self.reads
        report = progress or _quiet
        self.discovery.left_out = {}
        walked: list[str] = []

        def recorded() -> Iterator[FileState]:
            for state in walk:
                walked.append(state.path)
                yield state

        result = scan(known, recorded(), verify=verify)
        # A pass over some paths finds and misses notes too: a note created, moved or shrunk
        # under the size cap since the full walk counts, as the next full walk would count
        # it (else more notes are indexed than found).
        if embed is None:
            self._found = set(walked)
            self.manifest.set_meta(NOT_INDEXED_META, json.dumps(self.discovery.unindexed))
        elif self._found is not None:
            self._found.difference_update(result.gone)
            self._found.update(walked)
        # Only now, after the walk, does the discovery know which folders it could not read,
        # and which notes it left out for their size (copied: a fresh edit served at a pause
        # point runs a pass of its own).
        result.gone = keep_unreadable(result.gone, self._unreadable_dirs())
        too_big = dict(self.discovery.left_out)
        result.gone = [p for p in result.gone if p not in too_big]
        summary.notes_seen = result.seen
        summary.notes_unchanged = result.unchanged
        summary.notes_checked = result.distrusted
        summary.skipped = [{"path": p, "reason": r} for p, r in self.discovery.skipped]
        self._too_big(too_big, known, summary)

        with self._parser_pool(len(result.candidates)) as pool:
            written = self._keyword_phase(result, known, summary, report, pool)
        summary.keyword_seconds = time.perf_counter() - started
        self._embed_phase(summary, report, None if embed is None else {*written, *embed})

        summary.chunks_embedded = self.embedder.embedded - embedded_before
        summary.notes_read = self.reads - reads_before
        summary.seconds = time.perf_counter() - started
        counted = (summary.notes_changed, summary.notes_moved, summary.notes_touched)
        if any(counted) or summary.notes_deleted or summary.notes_failed:
            counts = {k: v for k, v in asdict(summary).items() if type(v) is int and v}
            log.info(
                "reconciled",
                **logs.notes({*written, *result.gone}),
                **counts,
                ms=logs.ms(summary.seconds),
                keyword_ms=logs.ms(summary.keyword_seconds),
            )

    @contextlib.contextmanager
    def _parser_pool(self, notes: int) -> Iterator[ParserPool | None]:
        """Worker processes to parse `notes` notes, if that many are worth them. Started
        before the hashing, so that the workers load meanwhile."""
        if self._parsers is None or notes < self.pool_above or self._pool is not None:
            yield None
            return
        with self._parsers() as pool:
            self._pool = pool
            try:
                yield pool
            finally:
                self._pool = None
                self._pools_cpu += pool.cpu_seconds

    @property
    def helper_cpu(self) -> float:
        """CPU seconds the parser's worker processes have used, for the daemon's pacing."""
        return self._pools_cpu + (self._pool.cpu_seconds if self._pool is not None else 0.0)

    def _keyword_phase(
        self,
        result: Scan,
        known: Mapping[str, KnownNote],
        summary: Summary,
        report: Progress,
        pool: ParserPool | None,
    ) -> list[str]:
        """Hash the candidates, classify them and apply the changes; the notes written."""
        hashed: list[tuple[FileState, str]] = []
        unreadable: list[_Failed] = []
        weights: dict[str, int] = {}
        contents = {k.sha256 for k in known.values() if k.ok}
        # The bytes hashed, kept up to a bound for the parser: a first index reads each note
        # once, not twice.
        kept: dict[str, _Read] = {}
        room = KEEP_READ_BYTES
        for done, state in enumerate(result.candidates, 1):
            try:
                data, read_under = self._read(state.path)
                sha256 = sha256_file(data)
                # The walk's stat can be older than these bytes: keep the one they were read under.
                hashed.append((read_under, sha256))
                if len(data) <= room:
                    kept[state.path] = (data, read_under)
                    room -= len(data)
                weights[state.path] = text_weight(data, copy=sha256 in contents)
                contents.add(sha256)
            except LeftOutError as exc:
                unreadable.append(NoteLeftOut(state, "", exc.kind, exc.reason))
            report("hash", done, len(result.candidates))
            self._pause(frozenset(), throttle=True)
        changes = classify(known, hashed, result.gone)
        self._record_failures(summary, unreadable)
        return self.apply(changes, summary, report, weights, pool=pool, read=kept)

    def _too_big(
        self,
        too_big: Mapping[str, tuple[FileState, str]],
        known: Mapping[str, KnownNote],
        summary: Summary,
    ) -> None:
        """Record the notes the walk left out for their size. Not notes under the rules, they
        lose what was indexed of them, as a note newly excluded does."""
        if not too_big:
            return
        chunks = {p: self.manifest.chunk_ids(p) for p in sorted(too_big) if p in known}
        indexed = [p for p, ids in chunks.items() if ids]
        if indexed:
            self.store.delete([i for p in indexed for i in chunks[p]])
        self._record_failures(
            summary,
            [NoteLeftOut(state, "", "too_big", reason) for state, reason in too_big.values()],
            deleted=indexed,
        )

    def _unreadable_dirs(self) -> list[str]:
        return [path for path, _ in self.discovery.unreadable if path.endswith("/")]

    def _read(self, path: str) -> _Read:
        """The note's bytes, with the stat its file had just before they were read.

        A write after that stat leaves the recorded mtime older than the file's, so a later
        pass reads the note again; a stat taken after the read would let it miss that write.
        The clock is read before both: a write in the same timestamp tick as the read then
        looks racy to `detect.trusted`, never older than the hash.
        """
        self.reads += 1
        hashed_ns = time.time_ns()
        try:
            # Never through a symlink swapped in since the walk (see Discovery.open_note).
            data, st = self.discovery.read_note(path)
        except NoteUnavailableError as exc:
            if exc.kind == "too_big":
                # Grown past the cap since the walk: not read at all.
                raise LeftOutError(path, f"{exc.reason}; skipped", "too_big") from exc
            raise LeftOutError(path, f"cannot read ({exc.reason})", "unreadable") from exc
        except OSError as exc:
            raise LeftOutError(path, f"cannot read ({exc.strerror or exc})", "unreadable") from exc
        return data, file_state(path, st, hashed_ns)

    # -- applying changes ----------------------------------------------------------------------

    def apply(
        self,
        changes: Sequence[Change],
        summary: Summary,
        report: Progress,
        weights: Mapping[str, int] | None = None,
        *,
        pool: ParserPool | None = None,
        read: dict[str, _Read] | None = None,
    ) -> list[str]:
        """The keyword phase: carry out `changes`, committing each note's chunks (their
        vectors are the embedding phase's); return the notes written. `weights` are the notes'
        shares of the work for progress (their sizes where missing); `pool` parses in worker
        processes; `read` holds notes read since the scan (bytes and the stat read under),
        taken instead of reading them again."""
        touched = [c.state for c in changes if c.kind == "touched"]
        for start in range(0, len(touched), BATCH_NOTES):
            stats = touched[start : start + BATCH_NOTES]
            # The store's metadata carries the mtime ("modified since" filters): republish it
            # from stored vectors; no embedding.
            self._restore(
                [c for s in stats for c in self.manifest.chunks_of(s.path)],
                mtimes={s.path: s.mtime_ns for s in stats},
            )
            self.manifest.apply(touched=stats)
        summary.notes_touched += len(touched)
        # Checked and found as recorded: the new time of the hash is all there is to keep.
        verified = [c.state for c in changes if c.kind == "verified"]
        for start in range(0, len(verified), BATCH_NOTES):
            self.manifest.apply(touched=verified[start : start + BATCH_NOTES])

        self._forget([c.path for c in changes if c.kind == "deleted"], summary)

        content = [c for c in changes if c.kind in ("created", "modified", "moved")]
        # Crash suspects go last: the rest of the vault is indexed first.
        suspects = [c for c in content if c.path in self._suspects]
        content = [c for c in content if c.path not in self._suspects]
        # PDFs and images (seconds each, in the extraction worker) after the notes, so that
        # the notes' words are searchable first; each is then a batch of its own, so that an
        # edit and the governor's rest come between two of them.
        content.sort(key=lambda c: kind_of(c.path) in EXTRACTED_KINDS)
        # Progress counts bytes of text (see vaultd.progress): a note is done once its batch
        # is written, and a batch advances with its embedding runs.
        weights = weights or {}

        def weight(change: Change) -> int:
            return weights.get(change.path, change.size)

        total = sum(weight(c) for c in content) + sum(weight(c) for c in suspects)
        done = batch_bytes = 0
        report("index", 0, total)

        written: list[str] = []
        batch: list[_Pending] = []
        failed: list[_Failed] = []
        # Notes read ahead for the pool and not yet written: in hand at a pause point.
        ahead: set[str] = set()
        batch_chunks = 0
        marked: list[str] = []
        # Sources of moves whose new path could not be read (moved or deleted again since the
        # scan): no later event names them, so nothing else would ever delete them.
        left: list[str] = []
        try:
            for change, outcome in self._prepared(content, marked, pool, read or {}, ahead):
                batch_bytes += weight(change)
                if isinstance(outcome, _Pending):
                    batch.append(outcome)
                    batch_chunks += len(outcome.chunks)
                    written.append(outcome.note.path)
                else:
                    failed.append(outcome)
                    if change.kind == "moved" and change.old_path:
                        left.append(change.old_path)
                if (
                    batch_chunks >= KEYWORD_BATCH_CHUNKS
                    or len(batch) >= BATCH_NOTES
                    or kind_of(change.path) in EXTRACTED_KINDS
                ):
                    self._flush(batch, failed, summary)
                    ahead.difference_update(p.change.path for p in batch)
                    ahead.difference_update(f.path for f in failed)
                    batch, failed, batch_chunks = [], [], 0
                    done, batch_bytes = done + batch_bytes, 0
                    report("index", done, total)
                    # The notes read ahead for the pool are in hand: an edit of one waits.
                    self._pause(frozenset(ahead))
            self._flush(batch, failed, summary)
            done, batch_bytes = done + batch_bytes, 0
            report("index", done, total)
            self._forget(left, summary)

            def isolated(change: Change) -> None:
                nonlocal done
                done += weight(change)
                report("index", done, total)

            written += self._isolate(suspects, marked, summary, isolated)
        except BaseException:
            # Abandoned (a graceful stop, an error raised), not crashed: these notes did
            # nothing wrong, so no attempt is counted against them.
            with contextlib.suppress(StoreError):
                self.manifest.clear_in_flight(marked)
            raise
        return written

    def _prepared(
        self,
        content: Sequence[Change],
        marked: list[str],
        pool: ParserPool | None,
        read: dict[str, _Read],
        ahead: set[str],
    ) -> Iterator[tuple[Change, _Pending | _Failed]]:
        """Each change with its note parsed and chunked, or why it could not be; in order.

        With a pool, notes are marked in flight a group at a time, read and handed to the
        workers ahead of the one whose result comes next; `ahead` gets the path of each note
        read (the caller takes them out as it writes them).
        """
        if pool is None:
            for change in content:
                self._mark(change, marked)
                yield change, self._prepare(change, read.pop(change.path, None))
            return

        def loaded() -> Iterator[_Loaded]:
            for start in range(0, len(content), MARK_GROUP):
                group = content[start : start + MARK_GROUP]
                self.manifest.mark_in_flight_many(
                    [(c.path, c.size, c.mtime_ns, c.sha256) for c in group]
                )
                marked.extend(c.path for c in group)
                for change in group:
                    ahead.add(change.path)
                    yield self._load(change, read.pop(change.path, None))

        for item, parsed in pool.parse_all(loaded(), lambda item: item.job):
            yield item.change, self._parsed(item, parsed)

    def _load(self, change: Change, read: _Read | None = None) -> _Loaded:
        """The note's bytes for parsing, with the stat they were read under and their hash
        (`read`: as read since the scan, which a write since then leaves older than the file,
        so that the next pass reads it again)."""
        state = change.state
        sha256 = change.sha256
        if read is not None and not self._unchanged_since(read[1]):
            read = None
        try:
            data, read_under = read or self._read(change.path)
            sha256 = sha256_file(data)
            self.faults.before_parse(data)
        except LeftOutError as exc:
            return _Loaded(change, failure=NoteLeftOut(state, sha256, exc.kind, exc.reason))
        except NoteError as exc:
            return _Loaded(change, failure=NoteFailed(state, sha256, str(exc)))
        return _Loaded(change, data, read_under, sha256)

    def _unchanged_since(self, state: FileState) -> bool:
        """Whether the note's file still has this stat (ctime and inode too: a write whose
        mtime was put back changes them): then bytes read under it are what it holds. Anything
        else (a save, a swap for a symlink, a path that needs `locate`) is read again, safely.
        A write within the read's timestamp tick is not seen here; the stat recorded with these
        bytes is then racy, and the write's own event, or the next pass, reads the note again."""
        try:
            st = os.stat(
                self.root / state.path, follow_symlinks=self.discovery.rules.follow_symlinks
            )
        except (OSError, ValueError):
            return False
        now = file_state(state.path, st)
        return (now.size, now.mtime_ns, now.ctime_ns, now.inode) == (
            state.size,
            state.mtime_ns,
            state.ctime_ns,
            state.inode,
        )

    def _prepare(self, change: Change, read: _Read | None = None) -> _Pending | _Failed:
        """The note of `change` read (unless given), parsed and chunked in this process."""
        item = self._load(change, read)
        if item.failure is not None:
            return item.failure
        parsed = parse_and_chunk(
            change.path,
            item.data,
            self.counter,
            max_bytes=self.max_bytes,
            max_tokens=self.max_tokens,
            extraction=self.extraction,
        )
        return self._parsed(item, parsed)

    def _forget(self, paths: Sequence[str], summary: Summary) -> None:
        """Delete these notes, but not one recreated since the scan (a backlog overtaken by a
        fresh edit)."""
        deleted = [path for path in paths if self.discovery.state_of(path) is None]
        if deleted:
            ids = [i for path in deleted for i in self.manifest.chunk_ids(path)]
            self.store.delete(ids)
            self.manifest.apply(deleted=deleted)
            summary.notes_deleted += len(deleted)
            for path in deleted:
                self._tell("note_deleted", path=path)
            summary.chunks_deleted += len(ids)

    def _mark(self, change: Change, marked: list[str]) -> None:
        self.manifest.mark_in_flight(change.path, change.size, change.mtime_ns, change.sha256)
        marked.append(change.path)

    def _isolate(
        self,
        suspects: Sequence[Change],
        marked: list[str],
        summary: Summary,
        report: Callable[[Change], None],
    ) -> list[str]:
        """Crash suspects, each in a batch of its own: if the process dies again, whether in
        the parser or the store, the note in flight is the one that did it (the embedding
        phase isolates its own suspects). Returns the notes written.

        A write per note costs about 40 ms more per note; only the notes in hand at an
        unclean end pay it, once.
        """
        written: list[str] = []
        for change in suspects:
            self._mark(change, marked)
            outcome = self._prepare(change)
            if isinstance(outcome, _Pending):
                self._flush([outcome], [], summary)
                written.append(outcome.note.path)
            else:
                self._flush([], [outcome], summary)
            # Still a suspect: the embedding phase tries its chunks alone too.
            self._pause(frozenset())
            report(change)
        return written

    def _pause(self, in_flight: frozenset[str], *, throttle: bool = False) -> None:
        if self._between_batches is None:
            return
        now = time.monotonic()
        if throttle and now - self._last_pause < PAUSE_EVERY:
            return
        self._last_pause = now
        self._between_batches(in_flight)

    def _parsed(self, item: _Loaded, parsed: Parsed | None) -> _Pending | _Failed:
        """What the parser made of a note read for it: its chunks to write, or a failure."""
        change = item.change
        if item.failure is not None:
            return item.failure
        assert parsed is not None, "a note read is parsed"
        if parsed.reason or parsed.note is None:
            if parsed.trace:
                log.error("the parser failed on a note", path=change.path, trace=parsed.trace)
            return _failure(change.state, item.sha256, parsed.reason, parsed.kind)
        note, chunks = parsed.note, list(parsed.chunks)
        assert item.state is not None, "a note read has the stat it was read under"
        sha256 = item.sha256
        if (item.state, sha256) != (change.state, change.sha256):
            # Written since it was hashed (perhaps with the same bytes): record what was read
            # now with the stat it was read under. The scan's is older than what a pass in
            # between may have recorded, and would cost a read on every later start.
            # New content at a moved note's path is no plain move, but still a move away from
            # the old path, whose chunks must go.
            kind = "created" if change.kind == "moved" and sha256 != change.sha256 else change.kind
            change = Change.of(kind, item.state, sha256, change.old_path)
        moved_ids: list[str] = []
        vectors: dict[str, np.ndarray] = {}
        if change.kind == "moved" and change.old_path:
            old = self.manifest.chunks_of(change.old_path)
            moved_ids = [c.id for c in old]
            vectors = self.manifest.vectors(self.model_id, {c.hash for c in old})
            chunks = self._rekeyed(old, vectors, note.path) or chunks
        elif change.old_path:  # a move whose content changed on the way
            moved_ids = self.manifest.chunk_ids(change.old_path)
        old_ids = self.manifest.chunk_ids(change.path)
        return _Pending(change, note, chunks, old_ids, moved_ids, vectors)

    @staticmethod
    def _rekeyed(
        old: list[StoredChunk], vectors: Container[str], new_path: str
    ) -> list[Chunk] | None:
        """A moved note keeps its chunks and vectors; only ids and note metadata change.

        Re-chunking could differ when the title comes from the file name (the prefix, and so
        the budget, changes), and a move must cost no embedding. The new title reaches the
        metadata and keyword index now, and the vectors when the note's content next changes.
        """
        if not old or any(c.hash not in vectors for c in old):
            return None
        return [
            Chunk(
                id=chunk_id(new_path, c.index),
                index=c.index,
                section=c.section,
                headings=c.headings,
                start_line=c.start_line,
                end_line=c.end_line,
                text=c.text,
                embed_text="",
                tokens=c.tokens,
                hash=c.hash,
                context=c.context,
                page=c.page,
                page_end=c.page_end,
                node=c.node,
                symbol=c.symbol,
            )
            for c in old
        ]

    def _flush(self, batch: list[_Pending], failed: list[_Failed], summary: Summary) -> None:
        """Commit the batch's notes and chunks (the keyword phase's write).

        A chunk whose text has a stored vector goes to the store at once; the others await
        the embedding phase. Records go to the store on the writer's thread, and the manifest
        moves once they are all in.
        """
        if batch:
            vectors = {h: v for p in batch for h, v in p.vectors.items()}
            hashes = {c.hash for p in batch for c in p.chunks} - vectors.keys()
            if hashes:
                vectors.update(self.manifest.vectors(self.model_id, hashes))
            written: set[str] = set()
            published: set[str] = set()
            try:
                for p in batch:
                    for record, text_hash in self._records(p, vectors):
                        self.writer.add(record, vectors[text_hash])
                        written.add(record.path)
                        published.add(record.id)
                self.writer.finish()
            except BaseException:
                self.writer.discard()
                self._put_back([p for p in batch if p.change.path in written])
                raise
            self._write(batch, published, summary)
        self._record_failures(summary, failed)

    def _put_back(self, batch: list[_Pending]) -> None:
        """Make the store hold what the manifest says of these notes again, after records of
        theirs were written but the manifest did not move."""
        if not batch:
            return
        try:
            self.store.delete([c.id for p in batch for c in p.chunks])
            for p in batch:
                self._restore(self.manifest.chunks_of(p.change.path))
        except StoreError as exc:
            # Put right later: the manifest still has these notes as they were, so the next pass
            # finds them changed (or touched, if changed back) and writes their records again.
            log.warning("could not put the store back for these notes", error=str(exc))

    def _record_failures(
        self, summary: Summary, failed: Iterable[_Failed], deleted: Sequence[str] = ()
    ) -> None:
        failed = list(failed)
        if not failed:
            return
        # A note failing the same way on every retry is logged once, not on every pass; a file
        # left out for the same kind of reason too, across restarts (the manifest remembers).
        before = self.manifest.records(f.path for f in failed)
        quarantined = self.manifest.apply(
            failed,
            deleted=deleted,
            quarantine_after=self.quarantine_after,
            done=[f.path for f in failed],
            suspects=self._suspects,
        )
        left = [f for f in failed if isinstance(f, NoteLeftOut)]
        for f in left:
            path, kind, reason = f.path, f.kind, f.reason
            was = before.get(path)
            if was is not None and was.known.left_out == kind:
                log.debug("note left out again", path=path, kind=kind, reason=reason)
            else:
                log.warning("note left out", path=path, kind=kind, reason=reason)
            summary.left_out.append({"path": path, "kind": kind, "reason": reason})
            self._tell("note_failed", path=path, reason=reason, status="left_out")
        summary.notes_left_out += len(left)
        rows = [f for f in failed if isinstance(f, NoteFailed)]
        for failure in rows:
            path, reason = failure.path, failure.reason
            row = before[path].row if path in before else None
            if path in quarantined:
                log.error("note quarantined: it keeps failing", path=path, reason=reason)
            elif row is not None and row["status"] == "failed" and row["error"] == reason:
                log.debug("note failed again", path=path, reason=reason)
            else:
                log.warning("note failed", path=path, reason=reason)
            summary.failures.append({"path": path, "reason": reason})
            status = "quarantined" if path in quarantined else "failed"
            self._tell("note_failed", path=path, reason=reason, status=status)
        summary.notes_failed += len(rows)

    def _records(self, p: _Pending, hashes: Container[str]) -> Iterator[tuple[Record, str]]:
        """The store's record of each chunk of a note whose text's hash is in `hashes`, with
        that hash."""
        for c in p.chunks:
            if c.hash not in hashes:
                continue
            metadata = chunk_metadata(
                path=p.note.path,
                title=p.note.title,
                tags=p.note.tags,
                aliases=p.note.aliases,
                link_targets=links_within(
                    ((link.target, link.line) for link in p.note.links), c.start_line, c.end_line
                ),
                section=c.section,
                headings=c.headings,
                index=c.index,
                start_line=c.start_line,
                end_line=c.end_line,
                mtime_ns=p.change.mtime_ns,
                sha256=p.change.sha256,
                model_id=self.model_id,
                kind=p.note.kind,
                location=c.location,
            )
            yield Record(c.id, p.change.path, c.text, metadata), c.hash

    def _write(self, batch: list[_Pending], published: set[str], summary: Summary) -> None:
        """Finish the batch whose records with vectors the writer has stored: drop from the
        store what its notes no longer have and what awaits new vectors, then move the
        manifest forward."""
        if not batch:
            return
        stale: list[str] = []
        moved_from: list[str] = []
        written: list[NoteWritten] = []
        for p in batch:
            change = p.change
            new_ids = {c.id for c in p.chunks}
            # An id kept with new text awaits its vector: its old record must not answer.
            stale.extend(i for i in p.old_ids if i not in published)
            if change.old_path:  # a move, even one whose content changed on the way
                moved_from.append(change.old_path)
                stale.extend(p.moved_ids)
            written.append(NoteWritten(p.note, change.state, change.sha256, tuple(p.chunks)))
            summary.chunks_reused += sum(1 for c in p.chunks if c.id in published)
            if change.kind == "moved":
                summary.notes_moved += 1
            else:
                summary.notes_changed += 1
                if change.kind == "modified":
                    summary.chunks_deleted += sum(1 for i in p.old_ids if i not in new_ids)
        if stale:
            self.store.delete(stale)
        # Only now, with the store holding the batch, does the manifest move forward.
        self.manifest.apply(
            written,
            deleted=moved_from,
            done=[p.change.path for p in batch],
            # A suspect stays one until the embedding phase has tried its chunks alone too.
            suspects=self._suspects,
        )
        for p in batch:
            self._tell("note_indexed", path=p.change.path)

    def _tell(self, kind: str, **fields: Any) -> None:
        if self.on_note is not None:
            self.on_note(kind, **fields)

    # -- the embedding phase -------------------------------------------------------------------

    def _embed_phase(
        self, summary: Summary, report: Progress, paths: Iterable[str] | None = None
    ) -> None:
        """Embed the chunks awaiting vectors (only those of `paths` when given), the most
        recently modified notes first, a batch at a time; crash suspects last, one at a time.

        Progress counts tokens, which the model's time follows. A chunk edited while it
        waits was chunked again by that edit's pass (served at a pause point) and is embedded
        in its new form only: each batch is read from the manifest when it starts, and an
        edit to a note of the batch in flight waits for the batch (`PausePoint`).
        """
        wanted = None if paths is None else sorted(set(paths))
        if wanted is not None and not wanted:
            return
        totals = self.manifest.awaiting_totals(self.model_id, wanted)
        if not totals.chunks:
            return
        suspects = set(self._suspects)
        done = 0
        report("embed", 0, totals.tokens)
        # Nothing is in hand now: an edit held while its note was read ahead of the keyword
        # phase's last write is served here, before that note's stale form can be embedded.
        self._pause(frozenset())
        unusable: set[str] = set()
        while True:
            chunks = self.manifest.awaiting(
                self.model_id, self.batch_chunks, paths=wanted, exclude=suspects
            )
            if not chunks:
                break
            chunks += self._twins(chunks, suspects)
            size = sum(c.tokens for c in chunks)

            def share(part: float, done: int = done, size: int = size) -> None:
                report("embed", min(totals.tokens, done + int(size * part)), totals.tokens)

            if not self._embed_batch(chunks, summary, unusable, share):
                break  # nothing came of it (cannot happen): never loop on the same batch
            done = min(totals.tokens, done + size)
            report("embed", done, totals.tokens)
            self._pause(frozenset())
        for path in sorted(suspects):
            if wanted is not None and path not in wanted:
                continue
            chunks = self.manifest.awaiting(self.model_id, 1 << 30, paths=[path])
            if chunks:
                self._embed_batch(chunks, summary, unusable, None)
                done = min(totals.tokens, done + sum(c.tokens for c in chunks))
                report("embed", done, totals.tokens)
            self._suspects.discard(path)
            self._pause(frozenset())
        if unusable:
            # Their chunks were recorded before the manifest kept the context they were
            # embedded with: chunk them again now, not at the next full pass.
            self._reconcile_some(unusable, (), None, set())

    def _twins(self, chunks: list[StoredChunk], suspects: set[str]) -> list[StoredChunk]:
        """Chunks of other notes with the same texts as these, awaiting (crash suspects' left
        out: each is tried alone). They come along with the batch: once its vectors are
        recorded they no longer await one, and would reach the store only at the next repair."""
        ids = {c.id for c in chunks}
        hashes = sorted({c.hash for c in chunks})
        found = self.manifest.awaiting(self.model_id, 1 << 30, exclude=suspects, hashes=hashes)
        return [c for c in found if c.id not in ids]

    def _embed_batch(
        self,
        chunks: list[StoredChunk],
        summary: Summary,
        unusable: set[str],
        share: Callable[[float], None] | None,
    ) -> bool:
        """Embed one batch of awaiting chunks, publish them as their vectors come, then
        record the vectors. False when the batch changed nothing (no vector, no failure)."""
        records = self.manifest.records({c.path for c in chunks})
        known = {p: r.known for p, r in records.items()}
        paths = sorted(known)
        self.manifest.mark_in_flight_many(
            [(p, known[p].size, known[p].mtime_ns, known[p].sha256) for p in paths]
        )
        rows = {p: r.row for p, r in records.items()}
        texts: dict[str, str] = {}
        waiting: dict[str, list[Record]] = {}
        by_path: dict[str, dict[str, str]] = {}
        for c in chunks:
            text = c.embed_text
            if c.path not in known or hashlib.sha256(text.encode()).hexdigest() != c.hash:
                unusable.add(c.path)
                continue
            texts.setdefault(c.hash, text)
            by_path.setdefault(c.path, {})[c.hash] = text
            metadata = _stored_metadata(c, rows[c.path], self.model_id)
            waiting.setdefault(c.hash, []).append(Record(c.id, c.path, c.text, metadata))
        bad = sorted(unusable & known.keys())
        if bad:
            log.warning(
                "chunks recorded without their context; reading these notes again", paths=bad
            )
            self.manifest.rechunk(bad)
        computed: dict[str, np.ndarray] = {}
        # A batch of a first index is minutes of embedding: its vectors are recorded as it
        # goes, each group once the store holds its records (the writer's mark), so that a
        # stop or a crash loses at most the last few seconds of it.
        landing: deque[tuple[int, dict[str, np.ndarray]]] = deque()
        fresh: dict[str, np.ndarray] = {}
        recorded: set[str] = set()
        since = time.monotonic()

        def record_landed() -> None:
            while landing and self.writer.landed(landing[0][0]):
                _, vectors = landing.popleft()
                self.manifest.add_vectors(self.model_id, vectors)
                recorded.update(vectors)

        def embedded(hashes: list[str], vectors: np.ndarray) -> None:
            nonlocal fresh, since
            self.vectors_made += len(hashes)
            for text_hash, vector in zip(hashes, vectors, strict=True):
                computed[text_hash] = vector
                fresh[text_hash] = vector
                for record in waiting.pop(text_hash, ()):
                    self.writer.add(record, vector)
            now = time.monotonic()
            if len(fresh) >= self.commit_chunks or now - since >= self.commit_seconds:
                landing.append((self.writer.sent(), fresh))
                fresh, since = {}, now
            record_landed()

        failures: dict[str, str] = {}
        in_flight = frozenset(paths)
        try:
            if texts:
                hashes = list(texts)
                try:
                    self.faults.before_embed(list(texts.values()))
                    self.embedder.embed_documents(
                        list(texts.values()),
                        pause=lambda: self._pause(in_flight),
                        progress=None if share is None else lambda n, of: share(n / of),
                        ready=lambda at, rows: embedded([hashes[i] for i in at], rows),
                    )
                except EmbedError:
                    # One bad note must not fail its neighbours: retry note by note.
                    for path, mine in by_path.items():
                        left = {h: t for h, t in mine.items() if h not in computed}
                        if not left:
                            continue
                        try:
                            self.faults.before_embed(list(left.values()))
                            embedded(list(left), self.embedder.embed_documents(list(left.values())))
                        except EmbedError as exc:
                            failures[path] = str(exc)
            self.writer.finish()
        except BaseException as exc:
            # Abandoned (a graceful stop, an error raised), not crashed: nothing is held
            # against these notes, and the vectors finished so far are kept, unless the store
            # is what failed. Records in the store whose vectors are not recorded are dropped
            # by the next pass (`sync_store`).
            if isinstance(exc, StoreError) or not self._keep(computed, recorded):
                self.writer.discard()
            with contextlib.suppress(StoreError):
                self.manifest.clear_in_flight(paths)
            raise
        # Only now, with the store holding the records, are the vectors recorded.
        self.manifest.add_vectors(
            self.model_id,
            {h: v for h, v in computed.items() if h not in recorded},
            done=[p for p in paths if p not in failures],
        )
        self._record_failures(
            summary,
            [
                NoteFailed(FileState(p, known[p].size, known[p].mtime_ns), known[p].sha256, reason)
                for p, reason in sorted(failures.items())
            ],
        )
        return bool(computed or failures or bad)

    def _keep(self, computed: Mapping[str, np.ndarray], recorded: Container[str]) -> bool:
        """Write the records of a batch given up and record the vectors computed for it;
        False when the store or the manifest would not take them."""
        try:
            self.writer.finish()
            self.manifest.add_vectors(
                self.model_id, {h: v for h, v in computed.items() if h not in recorded}
            )
        except StoreError as exc:
            log.warning("could not keep the vectors of the batch given up", error=str(exc))
            return False
        return True

    # -- keeping Chroma in step with the manifest ----------------------------------------------

    def sync_store(self) -> int:
        """Repair the store from the manifest: add what it lacks, drop what it should not have.

        Returns how many records were repaired. Runs before every pass, so a crash between the
        store write and the manifest commit, or a lost store, converges.
        """
        in_store = self.store.ids()
        # Ids only: on a big vault reading every chunk's text was most of a restart. Chunks
        # awaiting vectors are not expected: the embedding phase publishes them.
        expected = set(self.manifest.embedded_ids(self.model_id))
        repaired = 0
        for ids in _slices(sorted(expected - in_store), 1000):
            repaired += self._restore(list(self.manifest.chunks_by_id(ids).values()))
        extra = sorted(in_store - expected)
        if extra:
            self.store.delete(extra)
            repaired += len(extra)
        if repaired:
            log.warning("store repaired from the manifest", records=repaired)
        return repaired

    def _restore(self, chunks: list[StoredChunk], mtimes: Mapping[str, int] | None = None) -> int:
        """Publish these recorded chunks to the store with their stored vectors; a chunk
        without one awaits the embedding phase. Returns how many were published."""
        vectors = self.manifest.vectors(self.model_id, [c.hash for c in chunks])
        ready = [c for c in chunks if c.hash in vectors]
        notes = self.manifest.records({c.path for c in ready})
        metadatas: list[Metadata] = []
        for c in ready:
            row = dict(notes[c.path].row) if c.path in notes else {}
            if mtimes and c.path in mtimes:
                row["mtime_ns"] = mtimes[c.path]
            metadata = _stored_metadata(c, row, self.model_id)
            metadatas.append({**metadata, **self.embedder.passage_metadata(vectors[c.hash])})
        if ready:
            self.store.upsert(
                [c.id for c in ready],
                np.vstack([vectors[c.hash] for c in ready]),
                [c.text for c in ready],
                metadatas,
            )
        return len(ready)


def _slices(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _stored_metadata(chunk: StoredChunk, row: Mapping[str, Any], model_id: str) -> Metadata:
    return chunk_metadata(
        path=chunk.path,
        title=chunk.title,
        tags=row.get("tags", ()),
        aliases=row.get("aliases", ()),
        link_targets=links_within(
            ((link["target"], link.get("line")) for link in row.get("links", ())),
            chunk.start_line,
            chunk.end_line,
        ),
        section=chunk.section,
        headings=chunk.headings,
        index=chunk.index,
        start_line=chunk.start_line,
        end_line=chunk.end_line,
        mtime_ns=int(row.get("mtime_ns", 0)),
        sha256=str(row.get("sha256", "")),
        model_id=model_id,
        kind=str(row.get("kind", "note")),
        location=Location(chunk.page, chunk.page_end, chunk.node, chunk.symbol),
    )


__all__ = ["Indexer", "Progress", "Summary"]
