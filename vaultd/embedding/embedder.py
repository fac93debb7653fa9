"""Texts become vectors: one ONNX Runtime session on the CPU, batched and length-sorted.

Several runs go at once, one core each, rather than one run spread over every core: a batch of
32 chunks is too small for ONNX Runtime's intra-op threads to keep all cores busy (they wait for
each other at every operator), and measured on 2 cores the same batches finish about 5% sooner
this way. It also means other work in the process (writing to Chroma, parsing the next notes)
slows one run down instead of stalling every thread of every run.

Memory: a run's working memory in ONNX Runtime grows with its texts times its width squared
(the attention scores, one matrix per head and layer), and the CPU arena keeps the largest a run
needed for the life of the session, once per run at once. Runs are therefore also capped in
texts times width squared (`RUN_CELLS`), and the memory pattern, which allocates a second,
planned block for every run of a shape seen before, is off.

Pooling follows the model's manifest (mean over the attention mask for all-MiniLM-L6-v2), and
vectors are L2-normalised so cosine similarity is a dot product.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import onnxruntime as ort
from numpy.typing import NDArray

from vaultd.embedding.derive import restore
from vaultd.embedding.spec import ModelSpec, verify
from vaultd.embedding.tokens import load_tokenizer
from vaultd.errors import EmbedError, ModelError

Vectors = NDArray[np.float32]

#: A run's texts times its width squared, at most: 4 texts of 256 tokens, 16 of 128, 64 of 64.
#: Measured with all-MiniLM-L6-v2 on the CPU, a run of 8 texts of 256 tokens grows the arena
#: by 148 MB, 32 of 256 by 655 MB, 16 of 128 by 103 MB, 4 of 256 by 79 MB: a run holds about
#: 20 KB per padded token plus 0.2 KB per token per position of width. Under this cap a run
#: holds at most about 100 MB, whatever the texts, and short texts still go 32 (or
#: `max_batch_tokens`) at a time. Long texts cost no more per token in runs of 4 than of 8.
RUN_CELLS = 4 * 256 * 256

#: How the store compares vectors: by cosine, or by dot product (a pair's vectors: see
#: vaultd.embedding.paired).
Space = Literal["cosine", "ip"]


@dataclass(frozen=True, slots=True)
class Route:
    """One search of the store for a query: its vector, and the passages it ranks."""

    vector: Vectors
    #: Only the passages whose `english` metadata is this; None: every passage.
    english: bool | None = None


class TextEmbedder(Protocol):
    """What the indexer and the searcher need of a model (`Embedder`, `PairedEmbedder`)."""

    batch_size: int
    embedded: int

    @property
    def model_id(self) -> str: ...

    @property
    def dimensions(self) -> int: ...

    @property
    def space(self) -> Space: ...

    @property
    def loaded(self) -> bool: ...

    def embed_documents(
        self,
        texts: Sequence[str],
        *,
        pause: Callable[[], None] | None = None,
        progress: Callable[[int, int], None] | None = None,
        ready: Callable[[list[int], Vectors], None] | None = None,
    ) -> Vectors: ...

    def embed_query(self, text: str) -> Vectors: ...

    def query_routes(self, text: str) -> list[Route]: ...

    def passage_metadata(self, vector: Vectors) -> dict[str, Any]: ...

    def unload(self, unused_for: float) -> bool: ...

    def release_memory(self) -> None: ...


def workers_for(threads: int) -> int:
    """Runs at once for an `[embedding] threads` setting (0: one per core)."""
    return threads if threads > 0 else (os.cpu_count() or 1)


def session_options(intra_op_threads: int = 1) -> ort.SessionOptions:
    """vaultd's session options (one thread a run, see above); the benchmark's bare sessions
    use them too, with their own thread counts."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    # Shapes differ from run to run (length-sorted batches of every width): a pattern planned
    # for one shape is reused rarely, and each one is a block of its own beside the arena's
    # (a second 8 x 256 run took 148 MB to 279 MB with it, and stayed there).
    options.enable_mem_pattern = False
    return options


def open_session(spec: ModelSpec) -> ort.InferenceSession:
    spec.require_onnx()
    # A derived model removed from the cache since it was found there (by a cache cleaner,
    # while a daemon had it unloaded) is built again, not an error.
    restore(spec.onnx_path)
    verify(spec.onnx_path, spec.onnx_sha256)
    try:
        return ort.InferenceSession(
            str(spec.onnx_path), session_options(), providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # onnxruntime raises its own untyped errors
        raise ModelError(f"cannot load the ONNX model {spec.onnx_path}: {exc}") from exc


class Embedder:
    """Embeds documents and queries with one model. Thread-safe.

    Runs are not serialised: ONNX Runtime's `run` is safe to call from several threads, and a
    query must not wait behind a batch of documents the indexer is embedding. `threads` runs of
    one call go at once (0: one per core), each on one thread.
    """

    def __init__(
        self, spec: ModelSpec, *, threads: int = 0, batch_size: int = 32, max_batch_tokens: int = 0
    ) -> None:
        self.spec = spec
        self.batch_size = max(1, batch_size)
        self.workers = workers_for(threads)
        #: A cap on the padded tokens of one run (0: none). The daemon sets one so that a run,
        #: the longest a fresh edit waits for, takes about the same time whatever the texts.
        self.max_batch_tokens = max_batch_tokens
        self._tokenizer = load_tokenizer(spec)
        self._session: ort.InferenceSession | None = open_session(spec)
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._opening = threading.Lock()
        self._last_used = time.monotonic()
        #: Documents (not queries) embedded since start; `index --json` and status report it.
        self.embedded = 0

    @property
    def model_id(self) -> str:
        return self.spec.id

    @property
    def dimensions(self) -> int:
        return self.spec.dimensions

    def embed_documents(
        self,
        texts: Sequence[str],
        *,
        pause: Callable[[], None] | None = None,
        progress: Callable[[int, int], None] | None = None,
        ready: Callable[[list[int], Vectors], None] | None = None,
    ) -> Vectors:
        """Vectors for `texts`, in order; `pause` is called between two ONNX runs (the daemon
        serves a fresh edit there, or raises to abandon the work), `progress` after each run
        with the padded tokens done and their total, `ready` with the positions in `texts` a
        run embedded and their vectors. All three are called on the caller's thread."""
        prefix = self.spec.document_prefix
        texts = [prefix + t for t in texts] if prefix else list(texts)
        vectors = self._embed(texts, pause, progress, ready)
        self.embedded += len(texts)
        return vectors

    @property
    def space(self) -> Space:
        return "cosine"

    def embed_query(self, text: str) -> Vectors:
        vector: Vectors = self._embed([self.spec.query_prefix + text])[0]
        return vector

    def query_routes(self, text: str) -> list[Route]:
        """One search, of every passage."""
        return [Route(self.embed_query(text))]

    def passage_metadata(self, vector: Vectors) -> dict[str, Any]:
        """Nothing to add to a passage's metadata: one model, one route."""
        return {}

    def _embed(
        self,
        texts: list[str],
        pause: Callable[[], None] | None = None,
        progress: Callable[[int, int], None] | None = None,
        ready: Callable[[list[int], Vectors], None] | None = None,
    ) -> Vectors:
        out = np.zeros((len(texts), self.spec.dimensions), dtype=np.float32)
        if not texts:
            return out
        encodings = self._tokenizer.encode_batch(texts, add_special_tokens=True)
        ids = [self._fit(e.ids) for e in encodings]
        # Sorting by length keeps padding, and so wasted work, small within each batch.
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        batches = list(self._batches(order, ids))
        # Progress is counted in padded tokens, what a run costs: by texts it would race
        # through the short ones, which sorting puts first, and then crawl.
        total = sum(len(b) * len(ids[b[-1]]) for b in batches)
        done = 0

        def finished(batch: list[int], vectors: Vectors) -> None:
            nonlocal done
            out[batch] = vectors
            done += len(batch) * len(ids[batch[-1]])
            if ready is not None:
                ready(batch, vectors)
            if progress is not None:
                progress(done, total)

        if self.workers == 1 or len(batches) == 1:
            for number, batch in enumerate(batches):
                if number and pause is not None:
                    pause()
                finished(batch, self._run([ids[i] for i in batch]))
            return out
        # A call of its own gets a pool of its own: a fresh edit served from `pause` embeds
        # while this call's runs are in flight, and must not queue behind them.
        with ThreadPoolExecutor(self.workers, thread_name_prefix="vaultd-embed") as runs:
            flying: deque[tuple[list[int], Future[Vectors]]] = deque()
            try:
                for number, batch in enumerate(batches):
                    if len(flying) == self.workers:
                        finished(*_result(flying.popleft()))
                    if number and pause is not None:
                        pause()
                    flying.append((batch, runs.submit(self._run, [ids[i] for i in batch])))
                while flying:
                    finished(*_result(flying.popleft()))
            finally:
                for _, future in flying:
                    future.cancel()
        return out

    def _batches(self, order: list[int], ids: list[list[int]]) -> Iterator[list[int]]:
        """`batch_size` texts per run, fewer when `max_batch_tokens` (padded) or `RUN_CELLS`
        (the run's memory) says so."""
        cap = self.max_batch_tokens
        batch: list[int] = []
        for i in order:
            # Sorted by length: the text joining the batch is its longest, and sets its width.
            width = len(ids[i])
            if batch and (
                len(batch) == self.batch_size
                or (cap and (len(batch) + 1) * width > cap)
                or (len(batch) + 1) * width * width > RUN_CELLS
            ):
                yield batch
                batch = []
            batch.append(i)
        if batch:
            yield batch

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def unload(self, unused_for: float) -> bool:
        """Close the session once no run has ended for `unused_for` seconds (about 100 MB at
        rest); the next run opens it again (0.2 s). True when it closed it.

        A run in flight holds its own reference to the session, which outlives this.
        """
        with self._opening:
            if self._session is None or time.monotonic() - self._last_used < unused_for:
                return False
            self._session = None
        return True

    def _live(self) -> ort.InferenceSession:
        session = self._session
        if session is None:
            with self._opening:
                if self._session is None:
                    self._session = open_session(self.spec)
                session = self._session
        return session

    def release_memory(self) -> None:
        """Hand the memory ONNX Runtime's arena grew to for big batches back to the system.

        The arena keeps its peak (over a gigabyte after batches of long texts) for the life of
        the session; a tiny run with arena shrinkage enabled returns what is unused. The daemon
        calls this when it goes idle, so its resident memory at rest is the model's, not the
        backlog's.
        """
        options = ort.RunOptions()
        options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        ids = np.array([[0]], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        session = self._session
        if session is None:
            return
        try:
            session.run(None, feed, options)
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise EmbedError(f"the ONNX session failed to release its memory: {exc}") from exc

    def _fit(self, ids: list[int]) -> list[int]:
        window = self.spec.window
        if len(ids) <= window:
            return ids
        # The chunker keeps documents inside the window; only long queries get here.
        return ids[: window - 1] + ids[-1:]

    def _run(self, batch: list[list[int]]) -> Vectors:
        width = max(len(ids) for ids in batch)
        input_ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        feed = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(input_ids)
        # Marked used from its start: `unload` must not take a session just opened for it.
        self._last_used = time.monotonic()
        session = self._live()
        try:
            hidden = session.run(None, feed)[0]
        except Exception as exc:
            raise EmbedError(f"the ONNX session failed on a batch of {len(batch)}: {exc}") from exc
        finally:
            self._last_used = time.monotonic()
        return pool(np.asarray(hidden, dtype=np.float32), mask, self.spec.pooling)


def _result(flying: tuple[list[int], Future[Vectors]]) -> tuple[list[int], Vectors]:
    batch, future = flying
    return batch, future.result()


def pool(hidden: Vectors, mask: NDArray[np.int64], how: str) -> Vectors:
    if how == "cls":
        vectors = hidden[:, 0, :]
    else:
        weights = mask[:, :, None].astype(np.float32)
        vectors = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    normalised: Vectors = (vectors / np.clip(norms, 1e-12, None)).astype(np.float32)
    return normalised
