"""The embedding phase: the chunks awaiting vectors embedded, the most recently modified notes
first (a watched edit's pass embeds its own notes at once), each published as its vector
comes.

A note is indexed when none of its chunks awaits. A chunk awaits exactly while the manifest
holds no vector of the model for its text: there is no other mark to keep in step.
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import structlog

from vaultd.embedding.embedder import TextEmbedder
from vaultd.errors import EmbedError, StoreError
from vaultd.faults import Faults
from vaultd.index.outcomes import Outcomes, Summary
from vaultd.index.passes import Embedded, Pacing, Pauses, Progress
from vaultd.index.writer import Writer
from vaultd.records import FileState, KnownNote, NoteFailed, Record, StoredChunk
from vaultd.storage.manifest import Manifest
from vaultd.storage.metadata import stored_metadata

log = structlog.get_logger(__name__)


class _Landing:
    """A batch's vectors as they come: each record sent to the writer, and the vectors
    recorded a group at a time once the store holds the group's records (the writer's mark),
    so that a stop or a crash loses at most the last few seconds of a batch."""

    def __init__(
        self,
        writer: Writer,
        manifest: Manifest,
        model_id: str,
        pacing: Pacing,
        waiting: dict[str, list[Record]],
    ) -> None:
        self.writer = writer
        self.manifest = manifest
        self.model_id = model_id
        self.pacing = pacing
        self.waiting = waiting
        #: Texts the model embedded in this batch, counted as each run ends.
        self.made = 0
        self.computed: dict[str, np.ndarray] = {}
        self.recorded: set[str] = set()
        self._landing: deque[tuple[int, dict[str, np.ndarray]]] = deque()
        self._fresh: dict[str, np.ndarray] = {}
        self._since = time.monotonic()

    def embedded(self, hashes: list[str], vectors: np.ndarray) -> None:
        self.made += len(hashes)
        for text_hash, vector in zip(hashes, vectors, strict=True):
            self.computed[text_hash] = vector
            self._fresh[text_hash] = vector
            for record in self.waiting.pop(text_hash, ()):
                self.writer.add(record, vector)
        now = time.monotonic()
        pacing = self.pacing
        if len(self._fresh) >= pacing.commit_chunks or now - self._since >= pacing.commit_seconds:
            self._landing.append((self.writer.sent(), self._fresh))
            self._fresh, self._since = {}, now
        while self._landing and self.writer.landed(self._landing[0][0]):
            _, landed = self._landing.popleft()
            self.manifest.add_vectors(self.model_id, landed)
            self.recorded.update(landed)

    @property
    def unrecorded(self) -> dict[str, np.ndarray]:
        return {h: v for h, v in self.computed.items() if h not in self.recorded}


class EmbeddingPhase:
    def __init__(
        self,
        *,
        manifest: Manifest,
        embedder: TextEmbedder,
        writer: Writer,
        outcomes: Outcomes,
        pauses: Pauses,
        faults: Faults,
        pacing: Pacing,
    ) -> None:
        #: The unit of work: a batch's vectors and its notes' release move in one commit
        #: (`Manifest.add_vectors`).
        self.manifest = manifest
        self.embedder = embedder
        #: Publishes each record as its vector comes.
        self.writer = writer
        self.outcomes = outcomes
        self.pauses = pauses
        self.faults = faults
        self.pacing = pacing
        #: Texts the model embedded since start, counted as each batch ends or is given up (a
        #: pass stopped midway reports them; `Summary.chunks_embedded` counts passes that
        #: ended).
        self.vectors_made = 0

    def run(self, report: Progress, paths: Iterable[str] | None = None) -> Embedded:
        """Embed the chunks awaiting vectors (only those of `paths` when given), the most
        recently modified notes first, a batch at a time; crash suspects last, one at a time.

        Progress counts tokens, which the model's time follows. A chunk edited while it
        waits was chunked again by that edit's pass (served at a pause point) and is embedded
        in its new form only: each batch is read from the manifest when it starts, and an
        edit to a note of the batch in flight waits for the batch (`PausePoint`).

        Returns the phase's part of the summary, and the notes whose chunks were recorded
        without the context they are embedded with: the caller reads them again.
        """
        manifest, model_id, pauses = self.manifest, self.embedder.model_id, self.pauses
        summary = Summary()
        wanted = None if paths is None else sorted(set(paths))
        if wanted is not None and not wanted:
            return Embedded(summary)
        totals = manifest.vectors.awaiting_totals(model_id, wanted)
        if not totals.chunks:
            return Embedded(summary)
        suspects = set(manifest.failures.suspects)
        done = 0
        report("embed", 0, totals.tokens)
        # Nothing is in hand now: an edit held while its note was read ahead of the keyword
        # phase's last write is served here, before that note's stale form can be embedded.
        pauses(frozenset())
        unusable: set[str] = set()
        while True:
            chunks = manifest.vectors.awaiting(
                model_id, self.pacing.batch_chunks, paths=wanted, exclude=suspects
            )
            if not chunks:
                break
            chunks += self._twins(chunks, suspects)
            size = sum(c.chunk.tokens for c in chunks)

            def share(part: float, done: int = done, size: int = size) -> None:
                report("embed", min(totals.tokens, done + int(size * part)), totals.tokens)

            if not self._batch(chunks, summary, unusable, share):
                break  # nothing came of it (cannot happen): never loop on the same batch
            done = min(totals.tokens, done + size)
            report("embed", done, totals.tokens)
            pauses(frozenset())
        for path in sorted(suspects):
            if wanted is not None and path not in wanted:
                continue
            chunks = manifest.vectors.awaiting(model_id, 1 << 30, paths=[path])
            if chunks:
                self._batch(chunks, summary, unusable, None)
                done = min(totals.tokens, done + sum(c.chunk.tokens for c in chunks))
                report("embed", done, totals.tokens)
            manifest.failures.suspects.discard(path)
            pauses(frozenset())
        # Chunks recorded before the manifest kept the context they are embedded with: their
        # notes are chunked again now, not at the next full pass.
        return Embedded(summary, frozenset(unusable))

    def _twins(self, chunks: list[StoredChunk], suspects: set[str]) -> list[StoredChunk]:
        """Chunks of other notes with the same texts as these, awaiting (crash suspects' left
        out: each is tried alone). They come along with the batch: once its vectors are
        recorded they no longer await one, and would reach the store only at the next repair."""
        ids = {c.chunk.id for c in chunks}
        hashes = sorted({c.chunk.hash for c in chunks})
        found = self.manifest.vectors.awaiting(
            self.embedder.model_id, 1 << 30, exclude=suspects, hashes=hashes
        )
        return [c for c in found if c.chunk.id not in ids]

    def _batch(
        self,
        chunks: list[StoredChunk],
        summary: Summary,
        unusable: set[str],
        share: Callable[[float], None] | None,
    ) -> bool:
        """Embed one batch of awaiting chunks, publish them as their vectors come, then
        record the vectors. False when the batch changed nothing (no vector, no failure)."""
        manifest, model_id = self.manifest, self.embedder.model_id
        records = manifest.notes.records({c.path for c in chunks})
        known = {p: r.known for p, r in records.items()}
        paths = sorted(known)
        manifest.failures.hold([known[p] for p in paths])
        waiting: dict[str, list[Record]] = {}
        texts, by_path = self._texts(
            chunks, {p: r.row for p, r in records.items()}, waiting, unusable
        )
        bad = sorted(unusable & known.keys())
        if bad:
            log.warning(
                "chunks recorded without their context; reading these notes again", paths=bad
            )
            manifest.notes.rechunk(bad)
        run = _Landing(self.writer, manifest, model_id, self.pacing, waiting)
        failures: dict[str, str] = {}
        try:
            if texts:
                failures = self._embed(texts, by_path, run, frozenset(paths), share)
            self.writer.finish()
        except BaseException as exc:
            # Abandoned (a graceful stop, an error raised), not crashed: nothing is held
            # against these notes, and the vectors finished so far are kept, unless the store
            # is what failed. Records in the store whose vectors are not recorded are dropped
            # by the next pass (`sync_store`).
            if isinstance(exc, StoreError) or not self._keep(run.unrecorded):
                self.writer.discard()
            manifest.failures.abandon(paths)
            raise
        finally:
            self.vectors_made += run.made
        # Only now, with the store holding the records, are the vectors recorded.
        manifest.add_vectors(model_id, run.unrecorded, done=[p for p in paths if p not in failures])
        summary.add(
            self.outcomes.record_failures(
                [_failed(known[p], reason) for p, reason in sorted(failures.items())]
            )
        )
        return bool(run.computed or failures or bad)

    def _texts(
        self,
        chunks: list[StoredChunk],
        rows: Mapping[str, Mapping[str, Any]],
        waiting: dict[str, list[Record]],
        unusable: set[str],
    ) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
        """The texts to embed by hash, in the chunks' order, and each note's; `waiting` gets
        the records that wait for each text's vector, `unusable` the notes whose chunks cannot
        be embedded as recorded."""
        texts: dict[str, str] = {}
        by_path: dict[str, dict[str, str]] = {}
        for c in chunks:
            text = c.chunk.embed_text
            if c.path not in rows or hashlib.sha256(text.encode()).hexdigest() != c.chunk.hash:
                unusable.add(c.path)
                continue
            texts.setdefault(c.chunk.hash, text)
            by_path.setdefault(c.path, {})[c.chunk.hash] = text
            metadata = stored_metadata(c, rows[c.path], self.embedder.model_id)
            waiting.setdefault(c.chunk.hash, []).append(
                Record(c.chunk.id, c.path, c.chunk.text, metadata)
            )
        return texts, by_path

    def _embed(
        self,
        texts: Mapping[str, str],
        by_path: Mapping[str, Mapping[str, str]],
        run: _Landing,
        in_flight: frozenset[str],
        share: Callable[[float], None] | None,
    ) -> dict[str, str]:
        """Embed the texts, handing each vector to `run` as it comes; the notes whose texts
        could not be embedded, with why."""
        hashes = list(texts)
        embedder, faults = self.embedder, self.faults
        failures: dict[str, str] = {}
        try:
            faults.before_embed(list(texts.values()))
            embedder.embed_documents(
                list(texts.values()),
                pause=lambda: self.pauses(in_flight),
                progress=None if share is None else lambda n, of: share(n / of),
                ready=lambda at, rows: run.embedded([hashes[i] for i in at], rows),
            )
        except EmbedError:
            # One bad note must not fail its neighbours: retry note by note.
            for path, mine in by_path.items():
                left = {h: t for h, t in mine.items() if h not in run.computed}
                if not left:
                    continue
                try:
                    faults.before_embed(list(left.values()))
                    run.embedded(list(left), embedder.embed_documents(list(left.values())))
                except EmbedError as exc:
                    failures[path] = str(exc)
        return failures

    def _keep(self, unrecorded: Mapping[str, np.ndarray]) -> bool:
        """Write the records of a batch given up and record the vectors computed for it;
        False when the store or the manifest would not take them."""
        try:
            self.writer.finish()
            self.manifest.add_vectors(self.embedder.model_id, unrecorded)
        except StoreError as exc:
            log.warning("could not keep the vectors of the batch given up", error=str(exc))
            return False
        return True


def _failed(known: KnownNote, reason: str) -> NoteFailed:
    return NoteFailed(FileState(known.path, known.size, known.mtime_ns), known.sha256, reason)
