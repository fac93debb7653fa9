"""The read path: a query becomes ranked hits.

Hybrid by default: BM25 over vaultd's FTS5 indexes and cosine similarity from Chroma, fused by
weighted reciprocal rank fusion (RRF), which needs no score calibration between the two
retrievers; its parameters come from the `[search]` config section (docs/search.md says how
they were chosen). The two retrievers run concurrently.

- Filters (tags all-of and any-of, path prefix, frontmatter conditions, modified-since) select
  notes first, and both retrievers rank only inside them, so a filter never empties a page that
  a larger top-k would have filled.
- The keyword side knows Obsidian: title, aliases and heading path are indexed columns with their
  own BM25 weights. Text in scripts written without spaces (Chinese, Japanese, Thai, ...) is
  searched through a trigram index, or by substring for terms under three characters.
- A quoted phrase puts the passages holding it exactly in a first tier, above passages that only
  hold its words; within a tier the score decides, then path and line.
- At most `per_note` hits come from one note, applied before the top-k cut; with `merge`,
  neighbouring passages of one note become one hit with the combined line range.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import threading
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from vaultd.config import SearchSection
from vaultd.embedding.embedder import Embedder
from vaultd.errors import QueryError, VaultdError
from vaultd.records import Hit
from vaultd.storage.conditions import Condition, ConditionOp
from vaultd.storage.manifest import Manifest, StoredChunk
from vaultd.storage.schema import UNSPACED_RANGES
from vaultd.storage.vectors import VectorStore
from vaultd.vaultpath import vault_path

Mode = Literal["hybrid", "vector", "keyword"]
MODES: tuple[Mode, ...] = ("hybrid", "vector", "keyword")
MAX_K = 100
MAX_PER_NOTE = 100
#: Frontmatter conditions per search, and values in one `$in`: each is a piece of SQL.
MAX_CONDITIONS = 32
MAX_IN_VALUES = 256
#: Up to this many selected notes, Chroma is asked for them by path (`$in`); a larger selection
#: is queried more deeply and filtered here.
PATH_IN_LIMIT = 1000
#: The longest query taken, in characters: a cheap check before any parsing. Far more than the
#: embedding model reads (its window of 256-512 tokens is one to two thousand characters of
#: English; the rest is cut), and a pasted paragraph still fits.
MAX_QUERY_CHARS = 4096
#: The most keyword terms a query may send to the FTS5 indexes (distinct words left after stop
#: words, quoted phrases, and the trigrams of unspaced-script text). Each term is one more OR
#: branch whose postings SQLite walks and scores: a 1 MiB query of distinct words took 16 s of
#: CPU. A question has tens of terms; 256 leaves room for a pasted passage, or for about 250
#: characters of Chinese or Japanese, whose every three characters make a trigram term.
MAX_QUERY_TERMS = 256

_UNSPACED_CLASS = "".join(f"{chr(a)}-{chr(b)}" for a, b in UNSPACED_RANGES)
_UNSPACED_RUN = re.compile(f"[{_UNSPACED_CLASS}]+")
_HAS_UNSPACED = re.compile(f"[{_UNSPACED_CLASS}]")
_WORD = re.compile(r"\w+")
_PHRASE = re.compile(r'"([^"]+)"')
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
#: English function words, left out of the OR-ed keyword query (not out of quoted phrases):
#: they match most passages, so they cost time, and BM25 gives them almost no weight. On
#: SciFact the keyword query got 3x faster for -0.003 nDCG@10; on the help questions keyword
#: hit@5 rose from 0.69 to 0.76 (docs/search.md). A query of nothing else keeps them.
_STOP_WORDS = (
    "a about after all also am an and any are as at be been before being between both but by "
    "can could did do does each few for from had has have he her his how i if in into is it "
    "its me more most my no not of on or other our over own same she should so some such than "
    "that the their them then there these they this those through to too under until up very "
    "was we were what when where which who why will with would you your"
)
STOP_WORDS = frozenset(_STOP_WORDS.split())


# -- filters -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Filters:
    """Which notes a search may return; every filter must pass."""

    #: All of these tags (nested tags match their parents), without "#", lower-case.
    tags: tuple[str, ...] = ()
    #: At least one of these tags.
    tags_any: tuple[str, ...] = ()
    #: A folder (everything under it) or one note's exact path.
    path_prefix: str = ""
    #: Frontmatter conditions.
    where: tuple[Condition, ...] = ()
    #: Only notes whose file changed at or after this time (ns since the epoch).
    modified_since_ns: int | None = None

    @classmethod
    def build(
        cls,
        tags: Sequence[str] = (),
        tags_any: Sequence[str] = (),
        path_prefix: str = "",
        where: Mapping[str, Any] | Sequence[Condition] | None = None,
        modified_since: str | float | None = None,
    ) -> Filters:
        """Filters from request values, raising QueryError for anything malformed."""
        if where is None:
            conditions: tuple[Condition, ...] = ()
        elif isinstance(where, Mapping):
            conditions = parse_where(where)
        else:
            conditions = tuple(where)
        return cls(
            tags=_tags(tags),
            tags_any=_tags(tags_any),
            path_prefix=_path_prefix(path_prefix),
            where=conditions,
            modified_since_ns=None if modified_since is None else parse_since(modified_since),
        )

    @property
    def active(self) -> bool:
        return bool(
            self.tags
            or self.tags_any
            or self.path_prefix
            or self.where
            or self.modified_since_ns is not None
        )


def _path_prefix(prefix: str) -> str:
    """A folder or note of the vault, or "" for everywhere."""
    if not prefix:
        return ""
    try:
        return vault_path(prefix)
    except VaultdError as exc:
        raise QueryError(f"path_prefix: {exc}") from None


def _tags(tags: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(t.strip().lstrip("#").lower() for t in tags if t.strip("# ")))


_OPERATORS: dict[str, ConditionOp] = {
    "$eq": "eq",
    "$in": "in",
    "$gt": "gt",
    "$gte": "gte",
    "$lt": "lt",
    "$lte": "lte",
}


def _number_ok(value: float) -> bool:
    # SQLite stores 64-bit integers and finite doubles; anything else cannot be compared.
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    return math.isfinite(value)


def _scalar(field_name: str, value: Any) -> Any:
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, int | float) and _number_ok(value):
        return value
    raise QueryError(
        f"where.{field_name}: values must be strings, finite 64-bit numbers, booleans or null"
    )


def _bound(field_name: str, op: str, value: Any) -> float | str:
    if isinstance(value, int | float) and not isinstance(value, bool) and _number_ok(value):
        return value
    if isinstance(value, str):
        text = value.strip()
        try:
            parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            parsed = None
        if parsed is not None and _ISO_DATE.match(text):
            return text[:10] if len(text) == 10 else parsed.isoformat()
    raise QueryError(
        f"where.{field_name}: {op} needs a number or an ISO date (YYYY-MM-DD[THH:MM[:SS]]), "
        f"got {value!r}"
    )


def parse_where(where: Mapping[str, Any]) -> tuple[Condition, ...]:
    """`{"status": "done", "year": {"$gte": 2020}, "kind": {"$in": ["a", "b"]}}` as conditions.

    A plain value means equality; an object holds operators ($eq, $in, $gt, $gte, $lt, $lte),
    all of which must pass.
    """
    if not isinstance(where, Mapping):
        raise QueryError("where must be an object of field conditions")
    conditions: list[Condition] = []
    for name, spec in where.items():
        if not isinstance(name, str) or not name:
            raise QueryError("where: field names must be non-empty strings")
        if isinstance(spec, Mapping):
            if not spec:
                raise QueryError(f"where.{name}: an empty condition")
            for op_name, value in spec.items():
                op = _OPERATORS.get(op_name)
                if op is None:
                    known = ", ".join(_OPERATORS)
                    raise QueryError(f"where.{name}: unknown operator {op_name!r} (use {known})")
                if op == "in":
                    if not isinstance(value, list) or len(value) > MAX_IN_VALUES:
                        raise QueryError(
                            f"where.{name}: $in takes a list of at most {MAX_IN_VALUES} values"
                        )
                    items = tuple(_scalar(name, v) for v in value)
                    conditions.append(Condition(name, "in", items))
                elif op == "eq":
                    conditions.append(Condition(name, "eq", _scalar(name, value)))
                else:
                    conditions.append(Condition(name, op, _bound(name, op_name, value)))
        elif isinstance(spec, list):
            raise QueryError(f'where.{name}: for one of several values use {{"$in": [...]}}')
        else:
            conditions.append(Condition(name, "eq", _scalar(name, spec)))
    if len(conditions) > MAX_CONDITIONS:
        raise QueryError(f"where: at most {MAX_CONDITIONS} conditions")
    return tuple(conditions)


_FLAG = re.compile(r"^\s*([^=<>!]+?)\s*(>=|<=|=|>|<)\s*(.*?)\s*$", re.DOTALL)
_FLAG_OPS: dict[str, ConditionOp] = {"=": "eq", ">": "gt", ">=": "gte", "<": "lt", "<=": "lte"}


def _flag_value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "null":
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return text
    return number if number == number and abs(number) != float("inf") else text


def parse_where_flag(text: str) -> Condition:
    """A CLI condition: `field=value`, `field>=2024-01-01`, `field<5`; `a,b` after = means in."""
    match = _FLAG.match(text)
    if match is None or not match[1]:
        raise QueryError(
            f"--where {text!r}: expected FIELD=VALUE, FIELD>VALUE, FIELD>=VALUE, FIELD<VALUE "
            "or FIELD<=VALUE"
        )
    name, symbol, raw = match[1], match[2], match[3]
    op = _FLAG_OPS[symbol]
    if op == "eq":
        values = [v.strip() for v in raw.split(",")] if "," in raw else [raw]
        if len(values) > 1:
            return Condition(name, "in", tuple(_flag_value(v) for v in values))
        return Condition(name, "eq", _flag_value(raw))
    value = _flag_value(raw)
    return Condition(name, op, _bound(name, symbol, value))


def parse_since(value: str | float) -> int:
    """Nanoseconds since the epoch from epoch seconds or an ISO date or time (local if naive)."""
    if isinstance(value, bool):
        raise QueryError("modified_since must be an ISO date or epoch seconds")
    if isinstance(value, int | float):
        seconds = float(value) if _number_ok(value) else math.nan
    else:
        text = value.strip()
        try:
            seconds = float(text)
        except (ValueError, OverflowError):
            try:
                moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
                # A naive time is local time, as the user's clock shows it.
                seconds = moment.timestamp()
            except (ValueError, OverflowError, OSError):
                raise QueryError(
                    f"modified_since: {value!r} is neither an ISO date nor epoch seconds"
                ) from None
    if not (0 <= seconds < 1e11):
        raise QueryError(f"modified_since: {value!r} is out of range")
    return int(seconds * 1e9)


# -- the query ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParsedQuery:
    """A query split the way the indexes see it."""

    #: Quoted phrases, as written.
    phrases: tuple[str, ...]
    #: Words of spaced scripts (for the word index), phrase words included.
    words: tuple[str, ...]
    #: Runs of unspaced-script characters (for the trigram index or a substring scan).
    unspaced: tuple[str, ...]

    @classmethod
    def parse(cls, query: str) -> ParsedQuery:
        phrases = tuple(p.strip() for p in _PHRASE.findall(query) if _WORD.search(p))
        words: list[str] = []
        unspaced: list[str] = []
        for token in _WORD.findall(query.replace('"', " ")):
            unspaced.extend(_UNSPACED_RUN.findall(token))
            words.extend(w for w in _WORD.findall(_UNSPACED_RUN.sub(" ", token)) if w != "_")
        return cls(phrases, tuple(dict.fromkeys(words)), tuple(dict.fromkeys(unspaced)))

    def word_match(self) -> str:
        """The word index's MATCH expression: spaced phrases and every word but stop words,
        OR-ed."""
        return " OR ".join(self._word_terms())

    def _word_terms(self) -> list[str]:
        parts = [_fts_phrase(p) for p in self.phrases if not _HAS_UNSPACED.search(p)]
        words = [w for w in self.words if w.lower() not in STOP_WORDS] or self.words
        parts += [f'"{w}"' for w in words]
        return [p for p in parts if p]

    def phrase_requirement(self) -> str:
        """What an exact-phrase passage must match in the word index: every spaced phrase."""
        parts = [_fts_phrase(p) for p in self.phrases if not _HAS_UNSPACED.search(p)]
        return " AND ".join(p for p in parts if p)

    def trigram_match(self) -> str:
        """Each long unspaced run as a phrase, and its trigrams, OR-ed (n-gram matching)."""
        return " OR ".join(self._trigram_terms())

    def _trigram_terms(self) -> list[str]:
        parts: list[str] = []
        for run in self.unspaced:
            if len(run) >= 3:
                parts.append(f'"{run}"')
                parts.extend(f'"{run[i : i + 3]}"' for i in range(len(run) - 2) if len(run) > 3)
        return list(dict.fromkeys(parts))

    def short_unspaced(self) -> tuple[str, ...]:
        return tuple(run for run in self.unspaced if len(run) < 3)

    def term_count(self) -> int:
        """How many terms the keyword indexes are asked for (each one costs a postings walk)."""
        return len(self._word_terms()) + len(self._trigram_terms()) + len(self.short_unspaced())


def check_query(query: str) -> ParsedQuery:
    """The query parsed, or QueryError when it is empty or too big to search.

    The one rule for every way in (the socket API, the CLI with or without a daemon, MCP), so
    each refuses the same query with the same message.
    """
    if not query.strip():
        raise QueryError("the query is empty; give some words to search for")
    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(
            f"the query is {len(query)} characters long; at most {MAX_QUERY_CHARS} are searched"
        )
    parsed = ParsedQuery.parse(query)
    terms = parsed.term_count()
    if terms > MAX_QUERY_TERMS:
        raise QueryError(
            f"the query has {terms} search terms; at most {MAX_QUERY_TERMS} are searched "
            "(distinct words other than stop words, quoted phrases, and three-character pieces "
            "of text in scripts written without spaces)"
        )
    return parsed


def _fts_phrase(phrase: str) -> str:
    words = _WORD.findall(phrase)
    return '"' + " ".join(words) + '"' if words else ""


def fts_query(query: str) -> str:
    """The word index's MATCH expression for a query (quoted phrases kept, words OR-ed)."""
    return ParsedQuery.parse(query).word_match()


def _fold(text: str) -> str:
    """Case and accents folded, every run of non-word characters one space."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    bare = "".join(c for c in decomposed if not unicodedata.combining(c))
    return " " + " ".join(_WORD.findall(bare)) + " "


def has_phrase(text: str, phrase: str) -> bool:
    """Whether `text` holds `phrase` exactly, ignoring case, accents and punctuation."""
    needle = _fold(phrase)
    if _HAS_UNSPACED.search(phrase):
        return needle.strip() in _fold(text)
    return needle in _fold(text)


# -- ranking -----------------------------------------------------------------------------------

#: (chunk id, score; higher is better), best first.
Ranked = list[tuple[str, float]]


@dataclass(slots=True)
class _Group:
    """One hit being assembled: a chunk, or neighbouring chunks of one note when merging."""

    best: StoredChunk
    score: float
    parts: dict[str, Any]
    chunks: list[StoredChunk] = field(default_factory=list)


def rrf(lists: Mapping[str, Ranked], k: int, weights: Mapping[str, float]) -> Ranked:
    """Weighted reciprocal rank fusion, best first; equal scores in id order."""
    scores: dict[str, float] = {}
    for name, hits in lists.items():
        weight = weights.get(name, 1.0)
        for rank, (chunk_id, _) in enumerate(hits, 1):
            scores[chunk_id] = scores.get(chunk_id, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


class Searcher:
    """Answers queries from an open index; safe to call from several threads at once."""

    def __init__(
        self,
        manifest: Manifest,
        store: VectorStore,
        embedder: Embedder,
        settings: SearchSection | None = None,
    ) -> None:
        self.manifest = manifest
        self.store = store
        self.embedder = embedder
        self.settings = settings or SearchSection()

    def search(
        self,
        query: str,
        k: int = 10,
        mode: Mode = "hybrid",
        tags: Sequence[str] = (),
        path_prefix: str = "",
        *,
        filters: Filters | None = None,
        per_note: int | None = None,
        merge: bool | None = None,
        settings: SearchSection | None = None,
    ) -> list[Hit]:
        """The top `k` hits for `query`.

        `tags` and `path_prefix` are shorthands for the same fields of `filters`; `per_note`
        and `merge` default to the settings' values (`[search]`, or this searcher's own).
        """
        parsed = check_query(query)  # before anything else: a bad query fails the same always
        settings = settings or self.settings
        k = max(1, min(k, MAX_K))
        if filters is None:
            filters = Filters.build(tags=tags, path_prefix=path_prefix)
        elif tags or path_prefix:
            raise ValueError("pass tags and path_prefix inside filters, not beside them")
        cap = settings.per_note if per_note is None else max(0, per_note)
        merge = settings.merge if merge is None else merge
        paths = self.select(filters)
        if paths is not None and not paths:
            return []
        depth = max(settings.candidates, k)
        ranked = self.retrieve(query, parsed, mode, depth, paths, filters, settings.rrf_k)
        return self._page(parsed, mode, ranked, k, cap, merge, settings)

    def select(self, filters: Filters) -> list[str] | None:
        """The notes passing the filters, or None when nothing is filtered."""
        if not filters.active:
            return None
        return self.manifest.paths_matching(
            filters.tags,
            filters.path_prefix,
            tags_any=filters.tags_any,
            conditions=filters.where,
            modified_since_ns=filters.modified_since_ns,
        )

    def retrieve(
        self,
        query: str,
        parsed: ParsedQuery,
        mode: Mode,
        depth: int,
        paths: Sequence[str] | None = None,
        filters: Filters | None = None,
        rrf_k: int | None = None,
    ) -> dict[str, Ranked]:
        """Each retriever's ranked candidates ("keyword", "vector"), at most about `depth`.

        In hybrid mode the keyword side runs on a thread of its own while the query is embedded
        and Chroma searched: SQLite, ONNX Runtime and Chroma all release the GIL.
        """
        rrf_k = self.settings.rrf_k if rrf_k is None else rrf_k
        ranked: dict[str, Ranked] = {}
        if mode == "hybrid":
            keyword = _Background(lambda: self.keyword(parsed, depth, paths, rrf_k))
            ranked["vector"] = self.vector(query, depth, paths, filters or Filters())
            ranked["keyword"] = keyword.result()
        elif mode == "keyword":
            ranked["keyword"] = self.keyword(parsed, depth, paths, rrf_k)
        else:
            ranked["vector"] = self.vector(query, depth, paths, filters or Filters())
        return ranked

    def keyword(
        self, parsed: ParsedQuery, depth: int, paths: Sequence[str] | None, rrf_k: int | None = None
    ) -> Ranked:
        """BM25 over the word index, the trigram index, or both (then fused by rank)."""
        rrf_k = self.settings.rrf_k if rrf_k is None else rrf_k
        lists: dict[str, Ranked] = {}
        match = parsed.word_match()
        if match:
            found = self.manifest.keyword(match, depth, paths)
            required = parsed.phrase_requirement()
            if required:
                # Passages holding the phrases may rank below the depth on BM25 alone; fetch
                # them too, so the phrase tier is complete.
                found = _union(found, self.manifest.keyword(match, depth, paths, require=required))
            lists["words"] = found
        trigrams = parsed.trigram_match()
        if trigrams:
            lists["trigrams"] = self.manifest.keyword(trigrams, depth, paths, index="trigrams")
        short = parsed.short_unspaced()
        if short:
            lists["substring"] = self.manifest.substring(short, depth, paths)
        if not lists:
            return []
        if len(lists) == 1:
            return next(iter(lists.values()))
        return rrf(lists, rrf_k, {})[: 2 * depth]

    def vector(
        self, query: str, depth: int, paths: Sequence[str] | None, filters: Filters
    ) -> Ranked:
        """Cosine similarity from Chroma, restricted to `paths` when they are given."""
        vector = self.embedder.embed_query(query)
        if paths is None:
            return self.store.query(vector, depth)
        if len(paths) <= PATH_IN_LIMIT:
            where = {"path": {"$in": list(paths)}} if len(paths) > 1 else {"path": paths[0]}
            return self.store.query(vector, depth, where)
        # Too many notes to list: let Chroma pre-filter what its metadata can express (tags,
        # folder), then ask for more and keep the selected notes until there are enough.
        allowed = set(paths)
        where_meta = _chroma_where(filters)
        total = self.store.count()
        n = depth * 4
        while True:
            found = self.store.query(vector, min(n, total), where_meta)
            records = self.manifest.chunks_by_id([i for i, _ in found])
            kept = [(i, s) for i, s in found if i in records and records[i].path in allowed]
            if len(kept) >= depth or len(found) < min(n, total) or n >= total:
                return kept[:depth]
            n *= 4

    # -- the page ------------------------------------------------------------------------------

    def _page(
        self,
        parsed: ParsedQuery,
        mode: Mode,
        ranked: dict[str, Ranked],
        k: int,
        cap: int,
        merge: bool,
        settings: SearchSection,
    ) -> list[Hit]:
        weights = {"keyword": settings.keyword_weight, "vector": settings.vector_weight}
        pool = rrf(ranked, settings.rrf_k, weights) if mode == "hybrid" else list(ranked[mode])
        records = self.manifest.chunks_by_id([i for i, _ in pool])
        positions = {
            name: {chunk_id: (rank, score) for rank, (chunk_id, score) in enumerate(hits, 1)}
            for name, hits in ranked.items()
        }
        phrases = parsed.phrases if mode != "vector" else ()

        def tier(record: StoredChunk) -> int:
            if not phrases:
                return 0
            body = "\n".join((record.title, record.section, record.text))
            return int(all(has_phrase(body, p) for p in phrases))

        ordered: list[tuple[int, float, StoredChunk]] = []
        for chunk_id, score in pool:
            record = records.get(chunk_id)
            if record is not None:  # in the store but not (yet) in the manifest: never show it
                ordered.append((tier(record), score, record))
        ordered.sort(key=lambda item: (-item[0], -item[1], item[2].path, item[2].start_line))

        groups: list[_Group] = []
        per_path: dict[str, list[_Group]] = {}
        for phrase_tier, score, record in ordered:
            mine = per_path.setdefault(record.path, [])
            if merge and _merge_into(mine, record):
                continue
            if cap and len(mine) >= cap:
                continue
            if len(groups) == k:
                if merge:
                    continue  # a later neighbour may still join a hit already on the page
                break
            parts = _explain(
                record.id, mode, positions, weights, settings.rrf_k, phrases, phrase_tier
            )
            group = _Group(best=record, score=score, parts=parts, chunks=[record])
            mine.append(group)
            groups.append(group)
        return self._hits(groups)

    def _hits(self, groups: list[_Group]) -> list[Hit]:
        tags_by_path = self.manifest.tags_of(sorted({g.best.path for g in groups}))
        hits: list[Hit] = []
        for group in groups:
            best = group.best
            chunks = sorted(group.chunks, key=lambda c: c.index)
            parts = dict(group.parts)
            if len(chunks) > 1:
                parts["merged"] = [c.id for c in chunks]
            hits.append(
                Hit(
                    id=best.id,
                    path=best.path,
                    title=best.title,
                    section=chunks[0].section,
                    start_line=chunks[0].start_line,
                    end_line=max(c.end_line for c in chunks),
                    score=round(group.score, 6),
                    text="\n\n".join(c.text for c in chunks),
                    tags=tags_by_path.get(best.path, ()),
                    parts=parts,
                )
            )
        return hits


def _merge_into(groups: list[_Group], record: StoredChunk) -> bool:
    """Add `record` to a hit of its note that it neighbours; False when it neighbours none."""
    for group in groups:
        indexes = [c.index for c in group.chunks]
        if record.index in (min(indexes) - 1, max(indexes) + 1):
            group.chunks.append(record)
            return True
    return False


def _explain(
    chunk_id: str,
    mode: Mode,
    positions: Mapping[str, Mapping[str, tuple[int, float]]],
    weights: Mapping[str, float],
    rrf_k: int,
    phrases: Sequence[str],
    phrase_tier: int,
) -> dict[str, Any]:
    parts: dict[str, Any] = {}
    found = positions.get("keyword", {}).get(chunk_id)
    if found is not None:
        parts["keyword"] = {"rank": found[0], "score": round(found[1], 6)}
    found = positions.get("vector", {}).get(chunk_id)
    if found is not None:
        parts["vector"] = {"rank": found[0], "similarity": round(found[1], 6)}
    if mode == "hybrid":
        fusion = {
            name: round(weights[name] / (rrf_k + parts[name]["rank"]), 6)
            for name in ("keyword", "vector")
            if name in parts
        }
        parts["fusion"] = {**fusion, "k": rrf_k, "total": round(sum(fusion.values()), 6)}
    if phrases:
        # The boost is a tier: exact-phrase passages rank above all others, whatever the score.
        parts["phrase"] = {
            "phrases": list(phrases),
            "exact": bool(phrase_tier),
            "tier": phrase_tier,
        }
    return parts


def _union(first: Ranked, second: Ranked) -> Ranked:
    scores = dict(first)
    for chunk_id, score in second:
        scores.setdefault(chunk_id, score)
    return sorted(scores.items(), key=lambda item: -item[1])


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
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


#: Worker threads for the keyword side of hybrid searches, shared by every searcher in the
#: process and started on first use (starting a thread per query costs milliseconds).
_WORKERS = 4
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


class _Background:
    """Run one call on a shared worker thread; `result()` waits and re-raises its error."""

    def __init__(self, call: Callable[[], Ranked]) -> None:
        global _pool
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="vaultd-keyword")
            self._future: Future[Ranked] = _pool.submit(call)

    def result(self) -> Ranked:
        return self._future.result()


# -- presenting ----------------------------------------------------------------------------------

_OP_NAMES = {v: k for k, v in _OPERATORS.items()}


def where_json(conditions: Sequence[Condition]) -> dict[str, Any]:
    """Conditions in the API's `where` form, e.g. for sending CLI flags to the daemon."""
    out: dict[str, Any] = {}
    for c in conditions:
        value: Any = list(c.value) if isinstance(c.value, tuple) else c.value
        ops = out.setdefault(c.field, {})
        if _OP_NAMES[c.op] in ops:
            raise QueryError(f"--where: {c.field} has two {_OP_NAMES[c.op]} conditions")
        ops[_OP_NAMES[c.op]] = value
    return out


def explain_line(parts: Mapping[str, Any]) -> str:
    """A hit's score parts on one line, for people."""
    out: list[str] = []
    if "keyword" in parts:
        out.append(f"keyword #{parts['keyword']['rank']} (bm25 {parts['keyword']['score']:.3f})")
    if "vector" in parts:
        v = parts["vector"]
        out.append(f"vector #{v['rank']} (similarity {v['similarity']:.3f})")
    if "fusion" in parts:
        f = parts["fusion"]
        pieces = " + ".join(f"{f[n]:.4f} {n}" for n in ("keyword", "vector") if n in f)
        out.append(f"fusion {pieces} = {f['total']:.4f} (k {f['k']})")
    if "phrase" in parts:
        exact = parts["phrase"]["exact"]
        out.append("exact phrase: first tier" if exact else "phrase not exact: second tier")
    if "merged" in parts:
        out.append(f"merged {len(parts['merged'])} passages")
    return " · ".join(out)
