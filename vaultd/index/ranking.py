"""The page of a search: the retrievers' candidates fused by rank (weighted RRF), rescored
with what their notes add, ordered by known-item tier, at most `per_note` from one note,
neighbouring passages merged, and read into hits with how each was ranked (`parts`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from vaultd.answers import Hit, KnownTier
from vaultd.config import SearchSection
from vaultd.index import known
from vaultd.index.known import Evidence
from vaultd.query import Mode, ParsedQuery, has_phrase
from vaultd.records import Location, NoteKind, StoredChunk
from vaultd.storage.manifest import Manifest

#: The RRF constant of the notes ranked by their first passage (see `_with_notes`).
LEAD_RRF_K = 10

#: (chunk id, score; higher is better), best first.
Ranked = list[tuple[str, float]]
#: How many passages each of some notes has.
Counts = Callable[[Sequence[str]], Mapping[str, int]]


def rrf(lists: Mapping[str, Ranked], k: int, weights: Mapping[str, float]) -> Ranked:
    """Weighted reciprocal rank fusion, best first; equal scores in id order."""
    scores: dict[str, float] = {}
    for name, hits in lists.items():
        weight = weights.get(name, 1.0)
        for rank, (chunk_id, _) in enumerate(hits, 1):
            scores[chunk_id] = scores.get(chunk_id, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


@dataclass(slots=True)
class _Group:
    """One hit being assembled: a chunk, or neighbouring chunks of one note when merging."""

    best: StoredChunk
    score: float
    parts: dict[str, Any]
    chunks: list[StoredChunk] = field(default_factory=list)
    #: The known-item tier that placed it, if one did.
    ranked_by: KnownTier | None = None


def page(
    manifest: Manifest,
    model_id: str,
    parsed: ParsedQuery,
    mode: Mode,
    ranked: dict[str, Ranked],
    k: int,
    cap: int,
    merge: bool,
    settings: SearchSection,
    evidence: Evidence | None = None,
    counts: Counts | None = None,
) -> list[Hit]:
    """The top `k` hits of the retrievers' `ranked` candidates, at most `cap` of one note
    (0: any number), neighbours merged with `merge`. `counts` says how many passages notes
    have (a searcher's `Lexicon.passage_counts`; without it, the manifest is asked)."""
    weights = {"keyword": settings.keyword_weight, "vector": settings.vector_weight}
    leads = ranked.get("lead", [])
    if mode == "hybrid":
        pool = rrf({n: ranked[n] for n in weights if n in ranked}, settings.rrf_k, weights)
    else:
        pool = list(ranked[mode])
    wanted = dict.fromkeys([i for i, _ in pool] + [i for i, _ in leads])
    records = manifest.notes.chunks_by_id(list(wanted))
    notes: dict[str, _NoteTerms] = {}
    if mode == "hybrid":
        if leads:
            leads = _lead_ranking(leads, ranked.get("keyword", []), records, weights)
        pool, notes = _with_notes(
            counts or manifest.notes.chunk_counts, pool, leads, records, settings
        )
    positions = {
        name: {chunk_id: (rank, score) for rank, (chunk_id, score) in enumerate(hits, 1)}
        for name, hits in ranked.items()
    }
    phrases = parsed.phrases if mode != "vector" else ()
    evidence = evidence if evidence is not None and mode != "vector" else Evidence()

    def tier(record: StoredChunk) -> tuple[int, int]:
        """(the known-item tier, whether every quoted phrase is held exactly)."""
        body = "\n".join((record.title, record.chunk.section, record.chunk.text))
        exact = int(bool(phrases) and all(has_phrase(body, p) for p in phrases))
        level = evidence.tier(record.chunk.id, record.path, body)
        return (max(level, known.PHRASE) if exact else level), exact

    ordered: list[tuple[tuple[int, int], float, StoredChunk]] = []
    for chunk_id, score in pool:
        record = records.get(chunk_id)
        if record is not None:  # in the store but not (yet) in the manifest: never show it
            ordered.append((tier(record), score, record))
    ordered.sort(key=lambda item: (-item[0][0], -item[1], item[2].path, item[2].chunk.start_line))

    corrected = [asdict(c) for c in evidence.corrections]
    groups: list[_Group] = []
    per_path: dict[str, list[_Group]] = {}
    for (level, phrase_tier), score, record in ordered:
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
            record.chunk.id, mode, positions, weights, settings.rrf_k, phrases, phrase_tier
        )
        if record.path in notes:
            parts["note"] = notes[record.path].part()
        placed = known.TIER_NAMES[level] if level else None
        if placed is not None:
            parts["known"] = {"tier": placed, "level": level}
        if corrected:
            parts["corrections"] = corrected
        group = _Group(best=record, score=score, parts=parts, chunks=[record], ranked_by=placed)
        mine.append(group)
        groups.append(group)
    return _hits(manifest, model_id, groups)


def _with_notes(
    counted: Counts,
    pool: Ranked,
    leads: Ranked,
    records: Mapping[str, StoredChunk],
    settings: SearchSection,
) -> tuple[Ranked, dict[str, _NoteTerms]]:
    """The fused passages rescored with what their notes add, and what each note adds.

    A passage scores (its own + second_weight x its note's second-best passage + the
    note's lead term) x (passages in the note) ** -length_prior, so a note ranks by its
    best passage so scored. The lead term is lead_weight / (LEAD_RRF_K + rank), the rank
    being the note's in `leads`, the notes' first passages (`_lead_ranking`): what a note
    is about is said at its top, which the best passage alone often misses (a short
    question against a long note). A note found only that way is represented by its first
    passage. Chosen on the tuning halves (docs/search.md).
    """
    own: dict[str, list[float]] = {}
    for chunk_id, score in pool:
        record = records.get(chunk_id)
        if record is not None:
            own.setdefault(record.path, []).append(score)
    lead: dict[str, tuple[int, str]] = {}
    for rank, (chunk_id, _) in enumerate(leads, 1):
        record = records.get(chunk_id)
        if record is not None:
            lead.setdefault(record.path, (rank, chunk_id))
    if not (settings.second_weight or settings.length_prior or lead):
        return pool, {}
    paths = sorted(own.keys() | lead.keys())
    counts = counted(paths) if settings.length_prior else {}
    notes: dict[str, _NoteTerms] = {}
    for path in paths:
        scores = own.get(path, [])
        rank = lead[path][0] if path in lead else 0
        passages = counts.get(path, 1)
        notes[path] = _NoteTerms(
            lead_rank=rank,
            lead=settings.lead_weight / (LEAD_RRF_K + rank) if rank else 0.0,
            second=settings.second_weight * scores[1] if len(scores) > 1 else 0.0,
            passages=passages if settings.length_prior else 0,
            factor=max(1, passages) ** -settings.length_prior,
        )
    rescored: dict[str, float] = {}
    for chunk_id, score in pool:
        record = records.get(chunk_id)
        if record is not None:
            terms = notes[record.path]
            rescored[chunk_id] = (score + terms.added) * terms.factor
    for path, (_, chunk_id) in lead.items():
        if path not in own:
            terms = notes[path]
            rescored[chunk_id] = terms.added * terms.factor
    return sorted(rescored.items(), key=lambda item: (-item[1], item[0])), notes


@dataclass(frozen=True, slots=True)
class _NoteTerms:
    """What a note adds to its passages' scores in hybrid search (`_with_notes`)."""

    #: The note's rank among the leads (0: not among them) and its lead term.
    lead_rank: int
    lead: float
    second: float
    #: Its passages (0: no length prior) and the factor they give.
    passages: int
    factor: float

    @property
    def added(self) -> float:
        return self.second + self.lead

    def part(self) -> dict[str, Any]:
        """As a hit's score parts say it (made only for the notes on the page)."""
        part: dict[str, Any] = {}
        if self.lead_rank:
            part["lead"] = {"rank": self.lead_rank, "score": round(self.lead, 6)}
        if self.second:
            part["second"] = round(self.second, 6)
        if self.passages:
            part["length"] = {"passages": self.passages, "factor": round(self.factor, 6)}
        return part


def _hits(manifest: Manifest, model_id: str, groups: list[_Group]) -> list[Hit]:
    paths = sorted({g.best.path for g in groups})
    tags_by_path = manifest.notes.tags_of(paths)
    awaiting = manifest.vectors.awaiting_paths(model_id, paths, any_status=True)
    kinds = manifest.notes.kinds_of(paths)
    packages = manifest.notes.packages_of(paths)
    hits: list[Hit] = []
    for group in groups:
        best = group.best
        chunks = sorted(group.chunks, key=lambda c: c.chunk.index)
        parts = dict(group.parts)
        if len(chunks) > 1:
            parts["merged"] = [c.chunk.id for c in chunks]
        hits.append(
            Hit(
                id=best.chunk.id,
                path=best.path,
                title=best.title,
                section=chunks[0].chunk.section,
                start_line=chunks[0].chunk.start_line,
                end_line=max(c.chunk.end_line for c in chunks),
                score=round(group.score, 6),
                text="\n\n".join(c.chunk.text for c in chunks),
                tags=tags_by_path.get(best.path, ()),
                parts=parts,
                indexed=best.path not in awaiting,
                # The manifest records a note's kind as its extractor named it (NoteKind).
                kind=cast(NoteKind, kinds.get(best.path, "note")),
                location=Location(
                    chunks[0].chunk.location.page,
                    max((c.chunk.location.page_end or 0 for c in chunks), default=0) or None,
                    best.chunk.location.node,
                    best.chunk.location.symbol,
                ),
                package=packages.get(best.path),
                ranked_by=group.ranked_by,
            )
        )
    return hits


def _merge_into(groups: list[_Group], record: StoredChunk) -> bool:
    """Add `record` to a hit of its note that it neighbours; False when it neighbours none."""
    for group in groups:
        indexes = [c.chunk.index for c in group.chunks]
        if record.chunk.index in (min(indexes) - 1, max(indexes) + 1):
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


def _lead_ranking(
    by_vector: Ranked,
    keyword: Ranked,
    records: Mapping[str, StoredChunk],
    weights: Mapping[str, float],
) -> Ranked:
    """The notes' first passages ranked as the passages are: by the query's similarity to
    them (`by_vector`, Chroma's nearest first passages) fused by rank with the first passages
    among the keyword candidates, weighted as the passage fusion is.

    The vectors alone would add to every note a second vote of the vector side, which on
    claims that share their words with the answer (SciFact) outvotes the keyword side; with
    both, the lead says only what the note's top says. Measured: docs/search.md.
    """
    return rrf({"vector": by_vector, "keyword": firsts(keyword, records)}, LEAD_RRF_K, weights)


def firsts(ranked: Ranked, records: Mapping[str, StoredChunk]) -> Ranked:
    """The notes' first passages among `ranked`, in its order."""
    return [(i, s) for i, s in ranked if (r := records.get(i)) is not None and r.chunk.index == 0]
