"""The read path: a query becomes ranked hits.

Hybrid by default: BM25 over vaultd's FTS5 indexes and cosine similarity from Chroma, fused by
weighted reciprocal rank fusion (RRF), which needs no score calibration between the two
retrievers; its parameters come from the `[search]` config section (docs/search.md says how
they were chosen). The two retrievers run concurrently.

- Filters (tags all-of and any-of, path prefix, frontmatter conditions, modified-since, kinds,
  packages, and `package:NAME` written in the query) select notes first, and both retrievers
  rank only inside them, so a filter never empties a page that a larger top-k would have
  filled.
- The keyword side knows Obsidian: title, aliases and heading path are indexed columns with their
  own BM25 weights. Text in scripts written without spaces (Chinese, Japanese, Korean, Thai,
  ...) is searched as overlapping pairs of characters in an index of its own, or by substring
  for a lone character.
- Known items (`vaultd.index.known`): the note the query names, passages holding the query
  as typed (a quoted phrase, or an unquoted query of two words or more), then as corrected
  for typos, then holding its words close together, then a word only one or two notes hold
  rank in tiers above the rest, in keyword and hybrid mode; within a tier the score decides,
  then path and line. A paraphrased question has no such evidence and ranks by fusion.
- At most `per_note` hits come from one note, applied before the top-k cut; with `merge`,
  neighbouring passages of one note become one hit with the combined line range.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Generic, TypeVar

import numpy as np

from vaultd.answers import Hit, SearchResult, Short
from vaultd.config import SearchSection
from vaultd.embedding.embedder import Route, TextEmbedder
from vaultd.index import corrections, known
from vaultd.index.known import Evidence, Lexicon
from vaultd.index.ranking import Ranked, page, rrf
from vaultd.index.snippets import highlighted
from vaultd.query import (
    MAX_K,
    STOP_WORDS,
    Filters,
    Mode,
    ParsedQuery,
    SearchQuery,
    check_query,
)
from vaultd.storage.keyword import KEYWORD_WEIGHTS
from vaultd.storage.manifest import Manifest
from vaultd.storage.vectors import VectorStore

#: The notes' first passages come from one vector search this many times deeper than the
#: passages' (`Searcher.retrieve`), not from a second search filtered to first passages:
#: Chroma filters by its metadata first, which made that search 15 times a plain one on
#: SciFact's 9,832 passages, and the cost grows with the vault.
LEAD_DEPTH = 4
#: Up to this many selected notes, Chroma is asked for them by path (`$in`); a larger selection
#: is queried more deeply and filtered here.
PATH_IN_LIMIT = 1000
#: How long a count of the passages on each route (a pair of models) serves.
ROUTE_COUNTS_SECONDS = 60.0
#: A word of the query held by more than this share of the passages is left out of the OR-ed
#: words when a rarer word of the query is held by some passage (as Lucene's common terms
#: and Meilisearch's ranking do): BM25 gives it little weight, and ranking every passage that
#: holds it was most of a search's time on obsidian-hub (docs/benchmarks.md, "Known items").
COMMON_SHARE = 1 / 3
#: When the cap per note (or merging) leaves a page short of k hits and a retriever's list was
#: full, the search runs again this many times deeper, down to at most MAX_DEPTH passages a
#: retriever (then the answer says `short: "depth"`).
DEEPER = 4
MAX_DEPTH = 6400


class Searcher:
    """Answers queries from an open index; safe to call from several threads at once."""

    def __init__(
        self,
        manifest: Manifest,
        store: VectorStore,
        embedder: TextEmbedder,
        settings: SearchSection | None = None,
    ) -> None:
        self.manifest = manifest
        self.store = store
        self.embedder = embedder
        self.settings = settings or SearchSection()
        self._counting = threading.Lock()
        #: (when, passages by their `english` metadata), for `_shares`.
        self._route_counts: tuple[float, dict[bool, int]] | None = None
        self.lexicon = Lexicon(manifest)

    def search(self, asked: SearchQuery) -> SearchResult:
        """The top `k` hits for the query, with the typo corrections applied and, when one
        decided the first hit, the query as searched (for "showing results for ...").

        `per_note` and `merge` default to the settings' values (`[search]`, or this searcher's
        own); every hit says where the query's terms are in its text, and with `snippets` is
        given a short passage instead, saying where they are in that (`Hit.highlights`);
        without `known_items` no known-item tier applies and no typo is corrected.
        """
        parsed = check_query(asked.query)  # before anything else: a bad query fails the same
        settings = asked.settings or self.settings
        k = max(1, min(asked.k, MAX_K))
        query, mode, filters = asked.query, asked.mode, asked.filters
        if parsed.filters.active:
            # Filters written in the query (`package:NAME`): what is searched for is the rest.
            query = parsed.text
            narrowed = filters.narrowed_by(parsed.filters)
            if narrowed is None:
                return SearchResult((), short="exhausted")
            filters = narrowed
        cap = settings.per_note if asked.per_note is None else max(0, asked.per_note)
        merge = settings.merge if asked.merge is None else asked.merge
        paths = self.select(filters)
        if paths is not None and not paths:
            return SearchResult((), short="exhausted")
        depth = max(settings.candidates, k)
        leads = settings.lead_weight > 0
        while True:
            ranked, evidence = self._retrieve(
                query, parsed, mode, depth, paths, filters, settings.rrf_k, leads=leads,
                known_items=asked.known_items, typos=settings.typos,
            )  # fmt: skip
            hits = page(
                self.manifest, self.embedder.model_id, parsed, mode, ranked, k, cap, merge,
                settings, evidence, self.lexicon.passage_counts,
            )  # fmt: skip
            # The cap per note (or merging) thinned the page below k while a retriever's list
            # was full, so more notes may be deeper: search again, deeper.
            full = any(len(ranked.get(n, ())) >= depth for n in ("keyword", "vector"))
            if len(hits) >= k or not full or depth >= MAX_DEPTH:
                break
            depth = min(depth * DEEPER, MAX_DEPTH)
        short: Short | None = None
        if len(hits) < k:
            short = "depth" if full else "exhausted"
        result = self._corrected(
            query, parsed, mode, depth, paths, filters, settings, k, cap, merge, hits, evidence,
            leads=leads, known_items=asked.known_items, snippets=asked.snippets,
        )  # fmt: skip
        return replace(result, short=short)

    def _corrected(
        self,
        query: str,
        parsed: ParsedQuery,
        mode: Mode,
        depth: int,
        paths: Sequence[str] | None,
        filters: Filters,
        settings: SearchSection,
        k: int,
        cap: int,
        merge: bool,
        hits: list[Hit],
        evidence: Evidence,
        *,
        leads: bool,
        known_items: bool,
        snippets: bool,
    ) -> SearchResult:
        """The page with what the typo corrections did (`vaultd.index.corrections`): applied
        (`showing` when one decided the first hit), or, when the query as typed decided it, the
        page searched as typed with the correction offered (`did_you_mean`)."""
        if corrections.typed_decides(hits, evidence):
            # The query as typed found what it names (a note's name, its words in order): it is
            # searched as typed, and the corrections are only offered.
            offered = corrections.did_you_mean(self.manifest, query, evidence.corrections, hits)
            ranked, evidence = self._retrieve(
                query, parsed, mode, depth, paths, filters, settings.rrf_k, leads=leads,
                known_items=known_items, typos=False,
            )  # fmt: skip
            hits = page(
                self.manifest, self.embedder.model_id, parsed, mode, ranked, k, cap, merge,
                settings, evidence, self.lexicon.passage_counts,
            )  # fmt: skip
            hits = highlighted(self.manifest, hits, parsed, (), cut=snippets)
            return SearchResult(tuple(hits), did_you_mean=offered)
        hits = highlighted(self.manifest, hits, parsed, evidence.extra_terms, cut=snippets)
        return SearchResult(tuple(hits), *corrections.applied(query, hits, evidence))

    def select(self, filters: Filters) -> list[str] | None:
        """The notes passing the filters, or None when nothing is filtered."""
        return self.manifest.filters.matching(filters)

    def retrieve(
        self,
        query: str,
        parsed: ParsedQuery,
        mode: Mode,
        depth: int,
        paths: Sequence[str] | None = None,
        filters: Filters | None = None,
        rrf_k: int | None = None,
        *,
        leads: bool = False,
    ) -> dict[str, Ranked]:
        """Each retriever's ranked candidates ("keyword", "vector"), at most about `depth`;
        with `leads` in hybrid mode also "lead", the notes' first passages among a deeper
        vector search (ranked with the keyword side's first passages in `ranking.page`).

        In hybrid mode the keyword side runs on a thread of its own while the query is embedded
        and Chroma searched: SQLite, ONNX Runtime and Chroma all release the GIL.
        """
        return self._retrieve(
            query, parsed, mode, depth, paths, filters, rrf_k, leads=leads, known_items=False
        )[0]

    def _retrieve(
        self,
        query: str,
        parsed: ParsedQuery,
        mode: Mode,
        depth: int,
        paths: Sequence[str] | None = None,
        filters: Filters | None = None,
        rrf_k: int | None = None,
        *,
        leads: bool = False,
        known_items: bool = True,
        typos: bool = True,
    ) -> tuple[dict[str, Ranked], Evidence]:
        """`retrieve`, with the known-item evidence."""
        rrf_k = self.settings.rrf_k if rrf_k is None else rrf_k
        filters = filters or Filters()
        ranked: dict[str, Ranked] = {}
        evidence = Evidence()

        def keyword_side() -> tuple[Ranked, Evidence]:
            found = Evidence()
            if known_items:
                found = known.gather(
                    self.manifest, self.lexicon, query, parsed, depth, paths, typos=typos
                )
            return self.keyword(parsed, depth, paths, rrf_k, evidence=found), found

        if mode == "hybrid":
            keyword = _Background(keyword_side)
            routes = self.embedder.query_routes(query)
            if leads:
                deeper = self.nearest(
                    routes, max(depth, min(depth * LEAD_DEPTH, MAX_DEPTH)), paths, filters
                )
                ranked["vector"] = deeper[:depth]
                ranked["lead"] = self._first_passages(deeper)[:depth]
            else:
                ranked["vector"] = self.nearest(routes, depth, paths, filters)
            ranked["keyword"], evidence = keyword.result()
        elif mode == "keyword":
            ranked["keyword"], evidence = keyword_side()
        else:
            ranked["vector"] = self.vector(query, depth, paths, filters)
        return ranked, evidence

    def keyword(
        self,
        parsed: ParsedQuery,
        depth: int,
        paths: Sequence[str] | None,
        rrf_k: int | None = None,
        *,
        weights: Sequence[float] = KEYWORD_WEIGHTS,
        evidence: Evidence | None = None,
    ) -> Ranked:
        """BM25 over the word index, the pairs index, or both (then fused by rank); `weights`
        are the columns' (title, aliases, heading path, text). With `evidence`, the words its
        corrections add are OR-ed in and its tiers' passages join the candidates."""
        rrf_k = self.settings.rrf_k if rrf_k is None else rrf_k
        lists: dict[str, Ranked] = {}
        extra = evidence.extra_terms if evidence is not None else ()
        words = parsed.word_match(self.common_words(parsed, bool(extra)))
        match = " OR ".join(p for p in (words, *extra) if p)
        if match:
            found = self.manifest.keyword.bm25(match, depth, paths, weights=weights)
            required = parsed.phrase_requirement()
            if required:
                # Passages holding the phrases may rank below the depth on BM25 alone; fetch
                # them too, so the phrase tier is complete.
                found = _union(
                    found,
                    self.manifest.keyword.bm25(
                        match, depth, paths, weights=weights, require=required
                    ),
                )
            if evidence is not None and evidence.found:
                found = _after(found, [i for i, _ in evidence.found])
            lists["words"] = found
        pairs = parsed.pairs_match()
        if pairs:
            lists["pairs"] = self.manifest.keyword.bm25(
                pairs, depth, paths, weights=weights, index="pairs"
            )
        short = parsed.short_unspaced()
        if short:
            lists["substring"] = self.manifest.keyword.substring(
                short, depth, paths, weights=weights
            )
        if not lists:
            return []
        if len(lists) == 1:
            return next(iter(lists.values()))
        return rrf(lists, rrf_k, {})[: 2 * depth]

    def common_words(self, parsed: ParsedQuery, others: bool = False) -> frozenset[str]:
        """The query's words held by more than COMMON_SHARE of the passages, when a rarer word
        of it is held by some passage (or `others`, more terms, are searched too): left out of
        the OR-ed words. None when every word is that common."""
        vocabulary, _ = self.lexicon.current()
        limit = COMMON_SHARE * vocabulary.rows
        words = [w for w in dict.fromkeys(parsed.words) if w.lower() not in STOP_WORDS]
        if (len(words) < 2 and not others) or not vocabulary.rows:
            return frozenset()
        stem_of = known.stems_of(words)
        held = {w: vocabulary.chunks.get(stem_of.get(w, ""), 0) for w in words}
        common = frozenset(w for w in words if held[w] > limit)
        if common and (others or any(0 < n <= limit for n in held.values())):
            return common
        return frozenset()

    def vector(
        self, query: str, depth: int, paths: Sequence[str] | None, filters: Filters
    ) -> Ranked:
        """Similarity from Chroma, restricted to `paths` when they are given."""
        return self.nearest(self.embedder.query_routes(query), depth, paths, filters)

    def nearest(
        self,
        routes: Sequence[Route],
        depth: int,
        paths: Sequence[str] | None,
        filters: Filters,
    ) -> Ranked:
        """The passages nearest the query's routes, in `paths` when they are given.

        Two routes (a pair of models: vaultd.embedding.paired) rank disjoint passages by two
        models' similarities, which do not compare: their rankings are fused by rank (RRF),
        each weighted by its share of the passages, so that over a vault nearly all in English
        the other route's best passages come in far down, and over one half in each the two
        alternate. A fused passage's score is then its RRF score, not a similarity.
        """
        rankings = []
        for route in routes:
            only = None if route.english is None else {"english": route.english}
            rankings.append(self._nearest(route.vector, depth, paths, filters, only))
        if len(rankings) == 1:
            return rankings[0]
        shares = self._shares(routes)
        named = {str(i): ranking for i, ranking in enumerate(rankings)}
        weights = {str(i): share for i, share in enumerate(shares)}
        return rrf(named, self.settings.rrf_k, weights)[:depth]

    def _first_passages(self, ranked: Ranked) -> Ranked:
        firsts = self.lexicon.first_passages()
        return [(i, s) for i, s in ranked if i in firsts]

    def _shares(self, routes: Sequence[Route]) -> list[float]:
        """Each route's share of the passages it may rank (counted at most every
        ROUTE_COUNTS_SECONDS: a count lists ids)."""
        now = time.monotonic()
        with self._counting:
            if self._route_counts is None or now - self._route_counts[0] > ROUTE_COUNTS_SECONDS:
                counts = {flag: self.store.count_where({"english": flag}) for flag in (True, False)}
                self._route_counts = (now, counts)
            counts = self._route_counts[1]
        found = [counts.get(bool(route.english), 0) for route in routes]
        total = sum(found)
        return [n / total if total else 1.0 for n in found]

    def _nearest(
        self,
        vector: np.ndarray,
        depth: int,
        paths: Sequence[str] | None,
        filters: Filters,
        only: dict[str, Any] | None,
    ) -> Ranked:
        if paths is None:
            return self.store.query(vector, depth, only)
        if len(paths) <= PATH_IN_LIMIT:
            where = {"path": {"$in": list(paths)}} if len(paths) > 1 else {"path": paths[0]}
            return self.store.query(vector, depth, _all_of(where, only))
        # Too many notes to list: let Chroma pre-filter what its metadata can express (tags,
        # folder), then ask for more and keep the selected notes until there are enough.
        allowed = set(paths)
        where_meta = _all_of(_chroma_where(filters), only)
        total = self.store.count()
        n = depth * 4
        while True:
            found = self.store.query(vector, min(n, total), where_meta)
            records = self.manifest.notes.chunks_by_id([i for i, _ in found])
            kept = [(i, s) for i, s in found if i in records and records[i].path in allowed]
            if len(kept) >= depth or len(found) < min(n, total) or n >= total:
                return kept[:depth]
            n *= 4


def _union(first: Ranked, second: Ranked) -> Ranked:
    scores = dict(first)
    for chunk_id, score in second:
        scores.setdefault(chunk_id, score)
    return sorted(scores.items(), key=lambda item: -item[1])


def _after(ranked: Ranked, more: Sequence[str]) -> Ranked:
    """`ranked` with the ids of `more` it lacks after its own, in their order: scored by
    another expression, they must not move what `ranked` ranks (the tiers place them)."""
    have = {i for i, _ in ranked}
    floor = min((s for _, s in ranked), default=0.0)
    extra = [i for i in dict.fromkeys(more) if i not in have]
    return ranked + [(i, floor - 1e-6 * n) for n, i in enumerate(extra, 1)]


def _all_of(*clauses: dict[str, Any] | None) -> dict[str, Any] | None:
    given = [c for c in clauses if c]
    if not given:
        return None
    return given[0] if len(given) == 1 else {"$and": given}


def _chroma_where(filters: Filters) -> dict[str, Any] | None:
    """What Chroma's metadata can pre-filter exactly: tags and folder (never mtime, which the
    manifest updates for touched notes without rewriting Chroma)."""
    clauses: list[dict[str, Any]] = [{"tag_paths": {"$contains": t}} for t in filters.tags]
    if filters.tags_any:
        anyof = [{"tag_paths": {"$contains": t}} for t in filters.tags_any]
        clauses.append(anyof[0] if len(anyof) == 1 else {"$or": anyof})
    if filters.path_prefix:
        prefix = filters.path_prefix
        clauses.append({"$or": [{"folders": {"$contains": prefix}}, {"path": prefix}]})
    return _all_of(*clauses)


#: Worker threads for the keyword side of hybrid searches, shared by every searcher in the
#: process and started on first use (starting a thread per query costs milliseconds).
_WORKERS = 4
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_R = TypeVar("_R")


class _Background(Generic[_R]):
    """Run one call on a shared worker thread; `result()` waits and re-raises its error."""

    def __init__(self, call: Callable[[], _R]) -> None:
        global _pool
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="vaultd-keyword")
            self._future: Future[_R] = _pool.submit(call)

    def result(self) -> _R:
        return self._future.result()
