"""The query language: what a search may ask and how it is read, with no model or store.

A query's text is checked and cut into keyword terms (`check_query`, `ParsedQuery`), less the
filters written in it (`package:NAME`); filters (tags, a path prefix, frontmatter `where`
conditions, modified-since, kinds, packages) are parsed and checked into `Filters` and
`Condition`s, and a whole search as asked is one `SearchQuery`; the caps on all of it are
here. Search (`vaultd.index.search`) runs what this module has checked, the keyword index
(`vaultd.storage`) shares its idea of scripts written without spaces, and clients check a
query here before sending it to a daemon: importing this module loads neither onnxruntime nor
chromadb.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import math
import re
import unicodedata
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from vaultd.errors import QueryError, VaultdError
from vaultd.records import NOTE_KINDS
from vaultd.vaultpath import vault_path

if TYPE_CHECKING:
    from vaultd.config import SearchSection

#: Scripts written without spaces between words (CJK, kana, Hangul, Thai, Lao, Myanmar, Khmer):
#: the word index sees a whole run of them as one token, so the runs of chunks holding any of
#: these characters are also put, cut into overlapping pairs (`cjk_terms`), in an index of
#: their own (vaultd.storage.schema). Code-point ranges.
UNSPACED_RANGES = (
    (0x0E00, 0x0EFF),
    (0x1000, 0x109F),
    (0x1780, 0x17FF),
    (0x3040, 0x30FF),
    (0x3400, 0x9FFF),
    (0xAC00, 0xD7AF),
    (0xF900, 0xFAFF),
    (0xFF66, 0xFF9F),
    (0x20000, 0x2FFFF),
)
Scalar = str | int | float | bool | None
ConditionOp = Literal["eq", "in", "gt", "gte", "lt", "lte"]


@dataclass(frozen=True, slots=True)
class Condition:
    """A test on one frontmatter field; a list-valued field passes when any item does.

    `eq` and `in` compare strings case-insensitively and numbers with their text forms; the
    ranges compare numbers, or ISO dates (`YYYY-MM-DD` compares the day a value falls on).
    """

    field: str
    op: ConditionOp
    value: Scalar | tuple[Scalar, ...]


Mode = Literal["hybrid", "vector", "keyword"]
MODES: tuple[Mode, ...] = get_args(Mode)
#: How related notes are measured (vaultd.index.related).
How = Literal["fused", "coverage", "passages", "centroid", "words"]
HOWS: tuple[How, ...] = get_args(How)
MAX_K = 100
#: Most entries of a list answer (recent notes, mentions, backlinks).
MAX_LIST = 500
MAX_PER_NOTE = 100
#: Frontmatter conditions per search, and values in one `$in`: each is a piece of SQL.
MAX_CONDITIONS = 32
MAX_IN_VALUES = 256
#: Packages one search may name.
MAX_PACKAGES = 64
#: The longest query taken, in characters: a cheap check before any parsing. Far more than the
#: embedding model reads (its window of 256-512 tokens is one to two thousand characters of
#: English; the rest is cut), and a pasted paragraph still fits.
MAX_QUERY_CHARS = 4096
#: The most keyword terms a query may send to the FTS5 indexes (distinct words left after stop
#: words, quoted phrases, and the pairs of characters of unspaced-script text). Each term is
#: one more OR branch whose postings SQLite walks and scores: a 1 MiB query of distinct words
#: took 16 s of CPU. A question has tens of terms; 256 leaves room for a pasted passage, or for
#: about 250 characters of Chinese or Japanese, whose every two characters make a term.
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


def _path_prefix(prefix: str) -> str:
    """A folder or note of the vault, or "" for everywhere."""
    if not prefix:
        return ""
    try:
        return vault_path(prefix)
    except VaultdError as exc:
        raise QueryError(f"path_prefix: {exc}", "path_prefix") from None


def _excluded_paths(paths: Sequence[str]) -> tuple[str, ...]:
    """Folders or notes of the vault, each once."""
    out = []
    for path in paths:
        try:
            out.append(vault_path(path))
        except VaultdError as exc:
            raise QueryError(f"exclude_paths: {exc}", "exclude_paths") from None
    return tuple(dict.fromkeys(p for p in out if p))


def _kinds(kinds: Sequence[str]) -> tuple[str, ...]:
    """The kinds asked for, each one of `records.NOTE_KINDS` (any case)."""
    out = tuple(dict.fromkeys(k.strip().lower() for k in kinds if k.strip()))
    unknown = [k for k in out if k not in NOTE_KINDS]
    if unknown:
        raise QueryError(
            f"kinds: {unknown[0]!r} is not a kind; one of {', '.join(NOTE_KINDS)}", "kinds"
        )
    return out


def _packages(packages: Sequence[str]) -> tuple[str, ...]:
    """The package names asked for, lower-case, each once; a name holds no whitespace."""
    out = tuple(dict.fromkeys(p.strip().lower() for p in packages if p.strip()))
    spaced = [p for p in out if any(c.isspace() for c in p)]
    if spaced:
        raise QueryError(f"packages: {spaced[0]!r} is no package name", "packages")
    if len(out) > MAX_PACKAGES:
        raise QueryError(f"packages: at most {MAX_PACKAGES}", "packages")
    return out


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


def _bound(where: str, op: str, value: Any) -> float | str:
    """A bound of `$gt` and the like; refused naming the condition as it was given (`where`)."""
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
        f"{where}: {op} needs a number or an ISO date (YYYY-MM-DD[THH:MM[:SS]]), got {value!r}"
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
                    conditions.append(Condition(name, op, _bound(f"where.{name}", op_name, value)))
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
    return Condition(name, op, _bound(f"--where {name}", symbol, value))


def parse_since(value: str | float) -> int:
    """Nanoseconds since the epoch from epoch seconds or an ISO date or time (local if naive)."""
    if isinstance(value, bool):
        raise QueryError("since must be an ISO date or epoch seconds", "since")
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
                    f"since: {value!r} is neither an ISO date nor epoch seconds", "since"
                ) from None
    if not (0 <= seconds < 1e11):
        raise QueryError(f"since: {value!r} is out of range", "since")
    return int(seconds * 1e9)


def _asked(
    read: Callable[[Any], Any], name: str = "", *, term: str = "", one_of: bool = False
) -> dict[str, Any]:
    """A filter's field: `read` makes it of the value a request gives (raising QueryError for
    a malformed one), under `name` when the request names it otherwise. With `term`, a query
    may write it too, as `TERM:VALUE`; such values join the request's: as one more choice
    where the field is `one_of` (a note passes with any one of them), as one more condition
    otherwise."""
    return {"read": read, "asked": name, "term": term, "one_of": one_of}


def _conditions(where: Mapping[str, Any] | Sequence[Condition]) -> tuple[Condition, ...]:
    """`where` as the API takes it, or conditions parsed already (the CLI's `--where`)."""
    return parse_where(where) if isinstance(where, Mapping) else tuple(where)


@dataclass(frozen=True, slots=True)
class Filters:
    """Which notes a search may return; every filter must pass.

    A filter is declared here once, with how a request's value is read into it (`of`); the
    API's requests take it by the same name (vaultd.api.operations), and storage applies it
    (vaultd.storage.filters).
    """

    #: All of these tags (nested tags match their parents), without "#", lower-case.
    tags: tuple[str, ...] = dataclasses.field(default=(), metadata=_asked(_tags))
    #: At least one of these tags.
    tags_any: tuple[str, ...] = dataclasses.field(default=(), metadata=_asked(_tags))
    #: A folder (everything under it) or one note's exact path.
    path_prefix: str = dataclasses.field(default="", metadata=_asked(_path_prefix))
    #: Frontmatter conditions.
    where: tuple[Condition, ...] = dataclasses.field(default=(), metadata=_asked(_conditions))
    #: Only notes whose file changed at or after this time (ns since the epoch); asked for as
    #: `since`, an ISO date or time or epoch seconds.
    modified_since_ns: int | None = dataclasses.field(
        default=None, metadata=_asked(parse_since, "since")
    )
    #: Only files of these kinds (`records.NOTE_KINDS`: "note", "pdf", "canvas" ...).
    kinds: tuple[str, ...] = dataclasses.field(default=(), metadata=_asked(_kinds))
    #: Only source files of one of these packages (vaultd.pipeline.packages), lower-case:
    #: a name matches in any case.
    packages: tuple[str, ...] = dataclasses.field(
        default=(), metadata=_asked(_packages, term="package", one_of=True)
    )

    #: None of these tags (nested tags match their parents); `-tag:TAG` in a query.
    exclude_tags: tuple[str, ...] = dataclasses.field(
        default=(), metadata=_asked(_tags, term="-tag")
    )
    #: Nothing under these folders, nor these notes; `-path:FOLDER` in a query.
    exclude_paths: tuple[str, ...] = dataclasses.field(
        default=(), metadata=_asked(_excluded_paths, term="-path")
    )

    @classmethod
    def of(cls, asked: Mapping[str, Any]) -> Filters:
        """The filters a request's values ask for, each under the request's name for it;
        QueryError for anything malformed. A value that is None is no filter, and the
        request's other fields are none of the filters'."""
        values = {}
        for f in dataclasses.fields(cls):  # in their order: the first malformed is refused
            value = asked.get(f.metadata["asked"] or f.name)
            if value is not None:
                values[f.name] = f.metadata["read"](value)
        return cls(**values)

    @property
    def active(self) -> bool:
        return self != Filters()

    def narrowed_by(self, written: Filters) -> Filters | None:
        """These filters and, as well, those a query wrote (`ParsedQuery.filters`); None when
        no note can pass both (the choices of a `one_of` field are disjoint)."""
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(written):
            more = getattr(written, f.name)
            if not f.metadata["term"] or not more:
                continue
            asked = getattr(self, f.name)
            if f.metadata["one_of"] and asked:
                more = tuple(v for v in more if v in asked)
                if not more:
                    return None
            else:
                more = tuple(dict.fromkeys((*asked, *more)))
            changes[f.name] = more
        return dataclasses.replace(self, **changes) if changes else self


#: The filters a query may write, by the word before the colon (`package:serde`).
TERMS = {f.metadata["term"]: f for f in dataclasses.fields(Filters) if f.metadata["term"]}


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """One search as asked, the one way into vaultd.index.search.Searcher: the query, how many
    hits, how they are found and what of them is shown."""

    query: str
    #: How many hits (capped at MAX_K).
    k: int = 10
    mode: Mode = "hybrid"
    filters: Filters = Filters()
    #: At most this many hits from one note (0: any number); None: the settings' `per_note`.
    per_note: int | None = None
    #: Neighbouring passages of one note as one hit; None: the settings' `merge`.
    merge: bool | None = None
    #: Each hit with a short snippet of its text around the query's terms (`Hit.snippet`).
    snippets: bool = False
    #: Known items ranked in tiers above the fusion and typos corrected; off only to measure
    #: what they add.
    known_items: bool = True
    #: `[search]` settings for this search alone (a benchmark's sweep); None: the searcher's.
    settings: SearchSection | None = None


# -- the query ---------------------------------------------------------------------------------


#: A filter written in a query, outside quotes: `TERM:VALUE` (`Filters`' fields with a term),
#: not words to search for. The value runs to the next whitespace (`package:@changesets/config`).
_FILTER_TERM = re.compile(r"(?<!\S)(" + "|".join(map(re.escape, TERMS)) + r"):(\S+)", re.IGNORECASE)


def filter_terms(query: str) -> tuple[str, Filters]:
    """The query without its filter terms, and the filters they write (QueryError for a
    malformed value)."""
    values: dict[str, list[str]] = {}

    def taken(match: re.Match[str]) -> str:
        field = TERMS[match[1].lower()]
        values.setdefault(field.metadata["asked"] or field.name, []).append(match[2])
        return " "

    pieces = query.split('"')
    # Every other piece is outside quotes, and so is the last after an unmatched quote.
    outside = set(range(0, len(pieces), 2)) | ({len(pieces) - 1} if len(pieces) % 2 == 0 else set())
    for i in sorted(outside):
        pieces[i] = _FILTER_TERM.sub(taken, pieces[i])
    if not values:
        return query, Filters()
    return " ".join('"'.join(pieces).split()), Filters.of(values)


@dataclass(frozen=True, slots=True)
class ParsedQuery:
    """A query split the way the indexes see it."""

    #: Quoted phrases, as written.
    phrases: tuple[str, ...]
    #: Words of spaced scripts (for the word index), phrase words included.
    words: tuple[str, ...]
    #: Runs of unspaced-script characters (for the pairs index or a substring scan).
    unspaced: tuple[str, ...]
    #: The filters its terms write (`package:NAME`), searched for as no words.
    filters: Filters = Filters()
    #: The query less those terms: what is searched for, by words and by meaning.
    text: str = ""

    @classmethod
    def parse(cls, query: str) -> ParsedQuery:
        text, filters = filter_terms(query)
        phrases = tuple(p.strip() for p in _PHRASE.findall(text) if _WORD.search(p))
        words: list[str] = []
        unspaced: list[str] = []
        for token in _WORD.findall(text.replace('"', " ")):
            unspaced.extend(_UNSPACED_RUN.findall(token))
            words.extend(w for w in _WORD.findall(_UNSPACED_RUN.sub(" ", token)) if w != "_")
        return cls(
            phrases,
            tuple(dict.fromkeys(words)),
            tuple(dict.fromkeys(unspaced)),
            filters,
            text,
        )

    def word_match(self, leave_out: Collection[str] = ()) -> str:
        """The word index's MATCH expression: spaced phrases and every word but stop words
        (and those of `leave_out`, unless that leaves no word), OR-ed."""
        return " OR ".join(self._word_terms(leave_out))

    def _word_terms(self, leave_out: Collection[str] = ()) -> list[str]:
        parts = [_fts_phrase(p) for p in self.phrases if not _HAS_UNSPACED.search(p)]
        words = [w for w in self.words if w.lower() not in STOP_WORDS] or self.words
        words = [w for w in words if w not in leave_out] or words
        parts += [f'"{w}"' for w in words]
        return [p for p in parts if p]

    def phrase_requirement(self) -> str:
        """What an exact-phrase passage must match in the word index: every spaced phrase."""
        parts = [_fts_phrase(p) for p in self.phrases if not _HAS_UNSPACED.search(p)]
        return " AND ".join(p for p in parts if p)

    def pairs_match(self) -> str:
        """The pairs index's MATCH expression: each unspaced run of two characters or more as
        the phrase of its pairs (the run exactly), and each pair, OR-ed (bigram matching)."""
        return " OR ".join(self._pair_terms())

    def _pair_terms(self) -> list[str]:
        parts: list[str] = []
        for run in self.unspaced:
            if len(run) >= 2:
                pairs = _pairs(run)
                if len(pairs) > 1:
                    parts.append('"' + " ".join(pairs) + '"')
                parts.extend(f'"{pair}"' for pair in pairs)
        return list(dict.fromkeys(parts))

    def short_unspaced(self) -> tuple[str, ...]:
        """Lone unspaced characters: no pair holds them, so they are found by substring."""
        return tuple(run for run in self.unspaced if len(run) < 2)

    def term_count(self) -> int:
        """How many terms the keyword indexes are asked for (each one costs a postings walk)."""
        return len(self._word_terms()) + len(self._pair_terms()) + len(self.short_unspaced())


def _pairs(run: str) -> list[str]:
    return [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]


def cjk_terms(text: str) -> str:
    """The words the pairs index holds for `text`: each run of unspaced-script characters cut
    into its overlapping pairs (a lone character as itself), space-separated, as Lucene's CJK
    analyzer cuts Chinese, Japanese and Korean; the rest of the text is the word index's.

    Most Chinese words are two characters, so a query's pairs meet a note's whatever words it
    is written in; no dictionary is needed, and Japanese and Korean are cut the same way
    (measured against trigrams and jieba's words: bench/quality/cjk_terms.py, docs/search.md).
    """
    return " ".join(pair for run in _UNSPACED_RUN.findall(text) for pair in _pairs(run))


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
    if parsed.filters.active and not parsed.text.strip():
        written = ", ".join(f"{term}:" for term in TERMS)
        raise QueryError(
            "the query has filters but nothing to search for in it; give some words besides "
            f"the filters ({written})"
        )
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
    if text.isascii():  # most text; the per-character pass below is what costs
        return " " + " ".join(_WORD.findall(text.lower())) + " "
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    bare = "".join(c for c in decomposed if not unicodedata.combining(c))
    return " " + " ".join(_WORD.findall(bare)) + " "


def is_unspaced(text: str) -> bool:
    """Whether `text` holds characters of a script written without spaces (CJK, Thai...)."""
    return bool(_HAS_UNSPACED.search(text))


def has_phrase(text: str, phrase: str) -> bool:
    """Whether `text` holds `phrase` exactly, ignoring case, accents and punctuation."""
    needle = _folded_phrase(phrase)
    if _HAS_UNSPACED.search(phrase):
        return needle.strip() in _fold(text)
    return _may_hold(text, needle) and needle in _fold(text)


def may_hold(text: str, phrase: str) -> bool:
    """False when `text` lacks one of `phrase`'s words spelt in ASCII, so that neither it nor
    any text made by leaving parts of it out holds the phrase: `has_phrase`'s quick answer."""
    return _HAS_UNSPACED.search(phrase) is not None or _may_hold(text, _folded_phrase(phrase))


@functools.lru_cache(maxsize=256)
def _folded_phrase(phrase: str) -> str:
    """`_fold` of a search's phrase, which the search asks of every candidate passage."""
    return _fold(phrase)


def _may_hold(text: str, needle: str) -> bool:
    # Most passages a search looks at lack a word of the phrase: say so from the text's ASCII
    # letters alone, before folding it character by character. An ASCII word of the folded
    # text is a run of the same letters there (the marks folding drops are not ASCII either).
    if text.isascii():
        letters = text.lower()
    else:
        letters = unicodedata.normalize("NFKD", text.casefold()).encode("ascii", "ignore").decode()
    return all(not word.isascii() or word in letters for word in needle.split())


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
    if "note" in parts:
        n = parts["note"]
        notes: list[str] = []
        if "lead" in n:
            lead = n["lead"]
            notes.append(f"+ {lead['score']:.4f} first passage #{lead['rank']}")
        if "second" in n:
            notes.append(f"+ {n['second']:.4f} second passage")
        if "length" in n:
            notes.append(f"x {n['length']['factor']:.3f} ({n['length']['passages']} passages)")
        out.append("note " + " ".join(notes))
    if "phrase" in parts:
        exact = parts["phrase"]["exact"]
        out.append("exact phrase: first tier" if exact else "phrase not exact: second tier")
    if "merged" in parts:
        out.append(f"merged {len(parts['merged'])} passages")
    return " · ".join(out)
