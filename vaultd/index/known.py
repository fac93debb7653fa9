"""Known items: the evidence that a query is something a person remembers from one note.

Most searches in a personal vault are for a note the person wrote and half remembers: the
words they typed in order, with a typo, the note's name, a word only that note holds. Each of
these is exact evidence, which a ranked fusion of scores dilutes; `Searcher` puts the passages
holding it in tiers above the fusion (docs/search.md, "Known items"), best first:

1. **name**: the query, folded, is the note's title, an alias, its file name or its path;
   **definition**: a query of one identifier is the name a source passage defines (the last
   part of its symbol path: `transfer` for `contract ERC20 > function transfer`), so a
   definition ranks above the passages that only use the name;
2. **phrase**: the passage holds the query's words in order (case, accents, punctuation and
   Markdown markup folded; stop words kept), for a query of two words or more;
3. **corrected phrase**: the same after correcting the query's typos;
4. **proximity**: the passage holds every word of the query (stop words aside) close together;
5. **rare word**: the passage holds a word of a short query that only one or two notes hold.

Typos: a query word of 4 letters or more that the vault holds in no form and that is no stop
word nor common word of the language (`correctable`) is also searched as the index's terms
within one edit (4 to 8 letters) or two (9 and more), a swap of two letters counting as one.
A word the vault or the language knows is never corrected: a correction that cannot be wrong
is one made only where the word as typed finds nothing. Scripts written without spaces are
never corrected: their runs are searched as pairs of characters, which a typo leaves mostly
intact.
"""

from __future__ import annotations

import itertools
import re
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vaultd.answers import Correction, KnownTier
from vaultd.query import STOP_WORDS, ParsedQuery, has_phrase, is_unspaced, may_hold
from vaultd.storage import common_words
from vaultd.storage.keyword import stems
from vaultd.storage.manifest import Manifest
from vaultd.storage.vocabulary import Names, Vocabulary

#: The tiers, best first (the number is what sorts).
NAME, DEFINITION, PHRASE, STEMMED, CORRECTED, PROXIMITY, RARE = 7, 6, 5, 4, 3, 2, 1
TIER_NAMES: dict[int, KnownTier] = {NAME: "name", DEFINITION: "definition", PHRASE: "phrase",
                                    STEMMED: "stemmed phrase", CORRECTED: "corrected phrase",
                                    PROXIMITY: "proximity", RARE: "rare word"}  # fmt: skip
#: A query that may name a definition: one identifier (`transfer`, `ERC20`, `tool.ruff`,
#: `Data.Map.insertWith`), at least 3 characters.
_IDENTIFIER = re.compile(r"[A-Za-z_$][\w$.:-]{2,}")
#: The names in a symbol path's last part: `function transfer`, `impl Display for Widget`.
_SYMBOL_NAMES = re.compile(r"[\w$.:-]+")
#: A word is corrected only from this length, with one edit up to 8 letters and two from 9;
#: a word of 4 letters no note holds gets one edit (most are a longer word's deletion: `dail`,
#: `stoe`, `cunt` and `bout` were four of the six typos missed on the help vault's halves).
MIN_CORRECTED = 5
MIN_ABSENT_CORRECTED = 4
TWO_EDITS_FROM = 9
#: Corrections looked for per query, and vocabulary terms taken per corrected word.
MAX_CORRECTED_WORDS = 6
MAX_CANDIDATES = 3
#: Phrases tried when the corrections' alternatives multiply (each is one FTS5 phrase).
MAX_VARIANTS = 16
#: A word held by at most this many chunks is a rare-word candidate (then counted by notes).
RARE_CHUNKS = 8
#: A word is rare when at most this many notes hold it, and decides only in a query of at most
#: this many words (stop words aside): in a longer question a rare word is one clue of several.
RARE_NOTES = 2
RARE_QUERY_WORDS = 2
#: Corrections join the OR-ed words only in a query of at most this many words (stop words
#: aside); in a longer one they are evidence for the tiers alone.
MAX_OR_CORRECTED_WORDS = 5
#: Proximity: every word within this many other tokens per gap between them (FTS5 NEAR); 2
#: put a wrong note first for one help question (docs/search.md).
NEAR_GAP = 1
#: Words of a long query looked at for proximity, rare words and phrases: a pasted paragraph
#: is no remembered phrase, and each word is one more postings walk.
MAX_KNOWN_WORDS = 12
#: Notes a name may bring onto the page.
MAX_NAMED = 5

_WORD = re.compile(r"\w+")
_WIKILINK = re.compile(r"!?\[\[([^\]|]*)\|([^\]]*)\]\]")
_MDLINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the keyword side found exactly, by tier, and the corrections it applied."""

    #: Notes the query names.
    named: tuple[str, ...] = ()
    #: Chunk ids per tier (PHRASE, CORRECTED, PROXIMITY, RARE).
    chunks: dict[int, frozenset[str]] = field(default_factory=dict)
    #: The query's words as typed, for the markup-aware phrase check.
    words: tuple[str, ...] = ()
    corrections: tuple[Correction, ...] = ()
    #: FTS5 terms the corrections add to the OR-ed query.
    extra_terms: tuple[str, ...] = ()
    #: Words no note holds and no correction was found for.
    absent: tuple[str, ...] = ()
    #: Words no note holds that were corrected: every match of theirs is a correction's.
    replaced: tuple[str, ...] = ()
    #: The tiers' chunks (in the index's order, or a tier's best first by its own BM25 when
    #: more than the depth match), and the named notes' first chunks: added to the keyword
    #: side's candidates after its own.
    found: tuple[tuple[str, float], ...] = ()

    def tier(self, chunk_id: str, path: str, body: str) -> int:
        if path in self.named:
            return NAME
        held = self.chunks
        # The words as typed, not only their stems (`view can be` is not `views can be`); and
        # FTS5 reads a link's target and its shown text as one run of words, a reader does not.
        words = " ".join(self.words)
        if chunk_id in held.get(DEFINITION, ()):
            return DEFINITION
        stemmed = chunk_id in held.get(PHRASE, ())
        # Whether the text has the phrase's words at all is asked first: the links' markup is
        # taken out (`display`) of the few passages that do.
        if (
            len(self.words) > 1
            and (stemmed or "[" in body)
            and may_hold(body, words)
            and has_phrase(display(body), words)
        ):
            return PHRASE
        if stemmed:
            return STEMMED
        for level in (CORRECTED, PROXIMITY, RARE):
            if chunk_id in held.get(level, ()):
                return level
        return 0


def display(text: str) -> str:
    """Markdown links as a reader sees them: `[[target|shown]]` and `[shown](url)` as `shown`
    (`**`, backticks and the like are punctuation to the phrase check already)."""
    # Most passages hold neither kind; a search asks this of every candidate passage.
    if "[[" in text:
        text = _WIKILINK.sub(r"\2", text)
    return _MDLINK.sub(r"\1", text) if "](" in text else text


def query_words(query: str) -> tuple[str, ...]:
    """The query's words of spaced scripts in order, repeats kept (the phrase as typed)."""
    return tuple(w for w in _WORD.findall(query.replace('"', " ")) if w != "_")


def correctable(word: str, vocabulary: Vocabulary) -> bool:
    """Whether `word`, which no passage holds as the words index stems it, may be a typo: not
    a stop word, not held by the vault in another form (the index's term for `accident` is
    `accid`, while `accidentally` gives the term `accident`: the vault holds the word), and
    not a common word of the language (`vaultd.storage.common_words`). A word the vault holds
    as its own stem, in any case or number, never reaches here."""
    lower = word.lower()
    return not (lower in STOP_WORDS or lower in vocabulary.chunks or common_words.is_common(word))


def edits_allowed(word: str, held: bool = True) -> int:
    shortest = MIN_CORRECTED if held else MIN_ABSENT_CORRECTED
    if len(word) < shortest or not word.isalpha() or is_unspaced(word):
        return 0
    return 2 if len(word) >= TWO_EDITS_FROM else 1


@dataclass(frozen=True, slots=True)
class _Snapshot:
    writes: int
    vocabulary: Vocabulary
    names: Names
    firsts: frozenset[str]
    passages: dict[str, int]


class Lexicon:
    """The vocabulary, the notes' names, their first passages and how many passages each has,
    read from the manifest and read again, on a thread of its own, after it changed; a search
    uses the snapshot it finds (the first one waits)."""

    def __init__(self, manifest: Manifest) -> None:
        self.manifest = manifest
        self._lock = threading.Lock()
        self._snapshot: _Snapshot | None = None
        self._reading = False

    def current(self) -> tuple[Vocabulary, Names]:
        snapshot = self._current()
        return snapshot.vocabulary, snapshot.names

    def first_passages(self) -> frozenset[str]:
        """The ids of the notes' first passages. One that is in a snapshot stays a first
        passage (an id is its note's path and position), so an older snapshot can only miss
        the notes written since, until the next one is read."""
        return self._current().firsts

    def passage_counts(self, paths: Sequence[str]) -> dict[str, int]:
        """How many passages each of `paths` has: as the snapshot says, and for the notes
        written since, as the manifest does (a count the snapshot has may be a few writes
        old: it weighs a note's length, never what the note says)."""
        known = self._current().passages
        counts = {p: known[p] for p in paths if p in known}
        missing = [p for p in paths if p not in known]
        if missing:
            counts.update(self.manifest.notes.chunk_counts(missing))
        return counts

    def _current(self) -> _Snapshot:
        writes = self.manifest.writes
        with self._lock:
            snapshot = self._snapshot
            stale = snapshot is not None and snapshot.writes != writes and not self._reading
            if stale:
                self._reading = True
        if snapshot is None:
            snapshot = self._read()
        elif stale:
            threading.Thread(target=self._read, name="vaultd-lexicon", daemon=True).start()
        return snapshot

    def _read(self) -> _Snapshot:
        writes = self.manifest.writes  # before the reads: a write meanwhile reads again later
        try:
            snapshot = _Snapshot(
                writes,
                self.manifest.keyword.vocabulary(),
                self.manifest.notes.names(),
                self.manifest.notes.first_chunk_ids(),
                self.manifest.notes.chunk_counts(),
            )
        finally:
            with self._lock:
                self._reading = False
        with self._lock:
            self._snapshot = snapshot
        return snapshot


def gather(
    manifest: Manifest,
    lexicon: Lexicon,
    query: str,
    parsed: ParsedQuery,
    depth: int,
    paths: Sequence[str] | None,
    *,
    typos: bool = True,
) -> Evidence:
    """The known-item evidence for `query`: names, corrections (unless `typos` is off), and
    the chunks of each tier (each tier's chunks fetched by an FTS5 query of their own, so none
    is lost below the candidate depth)."""
    vocabulary, names = lexicon.current()
    named = tuple(p for p in names.notes_named(query) if paths is None or p in set(paths))
    words = query_words(query) if not parsed.phrases else ()
    if any(is_unspaced(w) for w in words):
        words = ()  # mixed scripts: the pairs index ranks the unspaced part; no phrase tier
    distinct = list(dict.fromkeys(parsed.words))[: MAX_KNOWN_WORDS * 4]
    stem_of = stems_of(distinct)
    corrections, alternatives, absent = _corrections(distinct, stem_of, vocabulary, typos)
    chunks: dict[int, frozenset[str]] = {}
    found: dict[str, float] = {}

    asked = [w for w in distinct if w.lower() not in STOP_WORDS]
    short = len(asked) <= RARE_QUERY_WORDS
    extra = _or_ed(alternatives, stem_of, vocabulary, asked)

    def required(expression: str) -> frozenset[str]:
        """The chunks matching `expression`: a selective expression alone costs little, where
        requiring it of the query's OR-ed words costs a second ranking of every passage
        holding any of them (hybrid p50 on obsidian-hub 1.45x before, 1.1x after:
        docs/benchmarks.md). Ranked by its own BM25 only when more than `depth` chunks match
        (then the best `depth` are the tier): BM25 walks each of its words' lists of chunks
        once more, which doubled the tiers' cost, and a tier's chunks are placed by the
        keyword side's own ranking where it has them."""
        if not expression:
            return frozenset()
        matched = [i for i, _ in chunks_holding_paths(manifest, expression, paths, depth + 1)]
        if len(matched) > depth:
            matched = [i for i, _ in manifest.keyword.bm25(expression, depth, paths)]
        for chunk_id in matched:
            found.setdefault(chunk_id, 0.0)
        return frozenset(matched)

    if 1 < len(words) <= MAX_QUERY_PHRASE:
        chunks[PHRASE] = required(_phrase(words))
        if alternatives:
            variants = _variants(words, alternatives)
            chunks[CORRECTED] = required(" OR ".join(_phrase(v) for v in variants))
    content = [w for w in dict.fromkeys(words) if w.lower() not in STOP_WORDS][:MAX_KNOWN_WORDS]
    if len(content) > 1 and not absent:
        variants = _variants(content, alternatives)
        gap = NEAR_GAP * (len(content) - 1)
        chunks[PROXIMITY] = required(
            " OR ".join(f"NEAR({' '.join(quoted(w) for w in v)}, {gap})" for v in variants)
        )
    chunks[DEFINITION] = _definitions(manifest, query, paths, depth)
    for chunk_id in chunks[DEFINITION]:
        found.setdefault(chunk_id, 0.0)
    chunks[RARE] = _rare(manifest, vocabulary, asked if short else [], stem_of, paths)
    for chunk_id in chunks[RARE]:
        found.setdefault(chunk_id, 0.0)
    for path in named[:MAX_NAMED]:
        first = manifest.notes.chunk_ids(path)[:1]
        for chunk_id in first:
            found.setdefault(chunk_id, 0.0)
    replaced = tuple(w for w in alternatives if vocabulary.chunks.get(stem_of[w], 0) == 0)
    return Evidence(
        named,
        chunks,
        words,
        corrections,
        extra,
        tuple(absent),
        replaced,
        tuple(found.items()),
    )


def _or_ed(
    alternatives: Mapping[str, Sequence[str]],
    stem_of: Mapping[str, str],
    vocabulary: Vocabulary,
    asked: Sequence[str],
) -> tuple[str, ...]:
    """The corrections OR-ed with the query's words (the others are the tiers' evidence).

    A word no note holds matches only through its corrections; one some note holds is OR-ed
    with its corrections only in a short query: in a question its corrections are tiers'
    evidence alone (OR-ed, `drawn` as `draw` reordered two help questions' notes). In a
    question of more words still, even a word no note holds is corrected only as the tiers'
    evidence: OR-ed, `coloured` as `color` pulled notes on colours above the callouts note for
    "put a coloured warning box that can be collapsed into my note".
    """
    short = len(asked) <= RARE_QUERY_WORDS
    long = len(asked) > MAX_OR_CORRECTED_WORDS
    return tuple(
        dict.fromkeys(
            quoted(t)
            for word, alts in alternatives.items()
            if short or (not long and vocabulary.chunks.get(stem_of[word], 0) == 0)
            for t in alts
        )
    )


def _rare(
    manifest: Manifest,
    vocabulary: Vocabulary,
    words: Sequence[str],
    stem_of: Mapping[str, str],
    paths: Sequence[str] | None,
) -> frozenset[str]:
    """The chunks holding one of `words` that only a few chunks of one or two notes hold."""
    rare: set[str] = set()
    for word in words:
        term = stem_of.get(word)
        if term is None:
            continue
        held = vocabulary.chunks.get(term, 0)
        if 0 < held <= RARE_CHUNKS:
            holding = chunks_holding_paths(manifest, quoted(word), paths, RARE_CHUNKS + 1)
            if 0 < len({p for _, p in holding}) <= RARE_NOTES:
                rare.update(i for i, _ in holding)
    return frozenset(rare)


#: The longest unquoted query taken as a phrase (in words): a pasted paragraph is still looked
#: for exactly, but one FTS5 phrase of its words is enough.
MAX_QUERY_PHRASE = 64


def _definitions(
    manifest: Manifest, query: str, paths: Sequence[str] | None, depth: int
) -> frozenset[str]:
    """The source passages defining the identifier `query` is: the heading path of a code
    passage is its symbol path, so the words index's `section` column finds the candidates
    cheaply, and each one's symbol says whether the name is its own."""
    name = query.strip()
    if not _IDENTIFIER.fullmatch(name) or name.lower() in STOP_WORDS:
        return frozenset()
    words = [w for w in re.findall(r"\w+", name) if w]
    match = "section : " + _phrase(words)
    candidates = [i for i, _ in chunks_holding_paths(manifest, match, paths, depth + 1)]
    records = manifest.notes.chunks_by_id(candidates)
    return frozenset(
        chunk_id for chunk_id, record in records.items()
        if record.chunk.location.symbol and defines(record.chunk.location.symbol, name)
    )  # fmt: skip


def defines(symbol: str, name: str) -> bool:
    """Whether `name` is what the symbol path's last part defines (its keyword aside)."""
    names = _SYMBOL_NAMES.findall(symbol.rsplit(" > ", 1)[-1])
    defined = names[1:] if len(names) > 1 else names
    folded = name.casefold()
    return any(n.casefold() == folded or n.casefold().strip("[]") == folded for n in defined)


def chunks_holding_paths(
    manifest: Manifest, match: str, paths: Sequence[str] | None, limit: int
) -> list[tuple[str, str]]:
    """(chunk id, path) of up to `limit` chunks matching `match` in `paths`, unranked."""
    return manifest.keyword.chunks_holding(match, limit, paths)


def _corrections(
    words: Sequence[str], stem_of: dict[str, str], vocabulary: Vocabulary, typos: bool = True
) -> tuple[tuple[Correction, ...], dict[str, tuple[str, ...]], list[str]]:
    """The corrections of the query's words, each word's added FTS5 words, and the words no
    note holds that nothing corrected (with `typos` off, nothing is corrected).

    Candidates come two ways, as a typo may fall in the part of a word the stemmer cuts off
    (`estimfte` is no edit of `estim`, the term of `estimate`): the words one edit from the
    word as typed whose term the vocabulary holds (a few hundred words, stemmed at once), and
    the vocabulary's terms within the allowed edits of the word's own term.
    """
    absent: list[str] = []
    wanted: list[tuple[str, str, int, int]] = []
    for word in words:
        term = stem_of.get(word)
        held = vocabulary.chunks.get(term, 0) if term else 0
        edits = edits_allowed(word, held > 0) if typos else 0
        if term is None or edits == 0 or held or not correctable(word, vocabulary):
            if term is not None and held == 0 and not is_unspaced(word):
                absent.append(word)
            continue
        if len(wanted) < MAX_CORRECTED_WORDS:
            wanted.append((word, term, edits, held))
    # Porter keeps a word's start and cuts at most a few letters (`estimate`: `estim`): a
    # variant none of whose long prefixes is a term cannot stem to one, and is not stemmed.
    typed = {
        v: w
        for w, _, _, _ in wanted
        for v in one_edit(w.lower())
        if any(v[:n] in vocabulary.chunks for n in range(max(3, len(v) - 4), len(v) + 1))
    }
    typed_terms = stems_of(list(typed))
    found: dict[str, dict[str, tuple[int, str]]] = {w: {} for w, _, _, _ in wanted}
    for variant, word in typed.items():
        term = typed_terms.get(variant)
        if term is not None and term in vocabulary.chunks:
            found[word].setdefault(term, (1, variant))
    near = {w: vocabulary.neighbours(t, e, limit=MAX_CANDIDATES * 3) for w, t, e, _ in wanted}
    # A term is searched as itself by FTS5 only when the tokenizer leaves it unchanged.
    usable = stems_of([t for pairs in near.values() for t, _ in pairs])
    for word, pairs in near.items():
        for t, d in pairs:
            if usable.get(t) == t and d < found[word].get(t, (d + 1, ""))[0]:
                found[word][t] = (d, t)
    corrections: list[Correction] = []
    alternatives: dict[str, tuple[str, ...]] = {}
    for word, term, _, _ in wanted:
        ranked = sorted(
            (d, -vocabulary.chunks[t], t, form) for t, (d, form) in found[word].items() if t != term
        )[:MAX_CANDIDATES]
        if not ranked:
            absent.append(word)
            continue
        alternatives[word] = tuple(form for _, _, _, form in ranked)
        corrections += [Correction(word=word, term=t, edits=d) for d, _, t, _ in ranked]
    return tuple(corrections), alternatives, absent


#: Words stemmed so far: the tokenizer runs in an in-memory SQLite table, a few milliseconds a
#: call; a query's words are mostly words asked before.
_STEMS: dict[str, str | None] = {}
_STEMS_LOCK = threading.Lock()
MAX_STEMS = 200_000


def stems_of(words: Sequence[str]) -> dict[str, str]:
    """`keyword.stems`, remembered."""
    with _STEMS_LOCK:
        known_ = {w: _STEMS[w] for w in words if w in _STEMS}
    new = [w for w in dict.fromkeys(words) if w not in known_]
    if new:
        found = stems(new)
        with _STEMS_LOCK:
            if len(_STEMS) > MAX_STEMS:
                _STEMS.clear()
            for w in new:
                known_[w] = _STEMS[w] = found.get(w)
    return {w: t for w, t in known_.items() if t is not None}


def one_edit(word: str) -> set[str]:
    """Every word one deletion, swap of neighbours, substitution or insertion from `word` (of
    the letters it holds and a-z)."""
    letters = set("abcdefghijklmnopqrstuvwxyz") | set(word)
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    out = {a + b[1:] for a, b in splits if b}
    out |= {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
    out |= {a + c + b[1:] for a, b in splits if b for c in letters}
    out |= {a + c + b for a, b in splits for c in letters}
    out.discard(word)
    return out


def _variants(
    words: Sequence[str], alternatives: dict[str, tuple[str, ...]]
) -> list[tuple[str, ...]]:
    """The word sequences with each corrected word replaced by one of its terms or kept as
    typed, the corrections first, at most MAX_VARIANTS."""
    options = [(*alternatives.get(w, ()), w) for w in words]
    return list(itertools.islice(itertools.product(*options), MAX_VARIANTS))


def quoted(word: str) -> str:
    return '"' + word.replace('"', "") + '"'


def _phrase(words: Sequence[str]) -> str:
    return '"' + " ".join(words) + '"'


def spelled(corrections: Sequence[Correction], texts: Sequence[str]) -> tuple[Correction, ...]:
    """The corrections with the word each term stands for as the notes spell it (`shown`), the
    commonest word of `texts` (the page's passages) that the index stems to the term; empty
    when none is, never the stem itself ("photographi" is no word to show anyone)."""
    if not corrections:
        return ()
    terms = {c.term for c in corrections}
    counts = Counter(
        w.lower() for text in texts for w in _WORD.findall(text) if w[:1].lower() in
        {t[:1] for t in terms}
    )  # fmt: skip
    stem_of = stems_of(list(counts))
    best: dict[str, str] = {}
    for word, _ in counts.most_common():
        term = stem_of.get(word)
        if term in terms:
            best.setdefault(term, word)
    return tuple(
        Correction(word=c.word, term=c.term, edits=c.edits, shown=best.get(c.term, ""))
        for c in corrections
    )


def showing(query: str, corrections: Sequence[Correction]) -> str | None:
    """The query as searched: each corrected word replaced by its first correction's spelling;
    None when no passage on the page spells one (the correction did not make the page)."""
    first: dict[str, str] = {}
    for c in corrections:
        if c.shown:
            first.setdefault(c.word, c.shown)
    if not first:
        return None
    return _WORD.sub(lambda m: first.get(m.group(0), m.group(0)), query)
