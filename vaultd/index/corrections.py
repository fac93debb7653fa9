"""Replace or offer: what a search does with the typo corrections `vaultd.index.known` found,
and what its answer says of them (docs/search.md, "Replace or offer").

The corrections replace a word (they are OR-ed in and make the corrected-phrase tier) only
when the query as typed finds nothing decisive. When the page's first hit is in a tier the
query as typed decides (TYPED_TIERS: a note's name, its words in order), the search runs again
as typed and the corrected query is only offered (`did_you_mean`). Either way a correction is
shown as the vault's passages spell its term, never as the index's stem.
"""

from __future__ import annotations

from collections.abc import Sequence

from vaultd.answers import Correction, Hit
from vaultd.index import known
from vaultd.index.known import Evidence
from vaultd.storage.manifest import Manifest

#: The known-item tiers that the query as typed decides: when one of them holds the first hit,
#: the typed query is decisive and is searched as typed, its corrections only offered ("did
#: you mean").
TYPED_TIERS = ("name", "definition", "phrase", "stemmed phrase")
#: Passages read to spell an offered correction the page itself does not spell.
SPELLING_PASSAGES = 3


def first_tier(hits: Sequence[Hit]) -> str | None:
    """The known-item tier of the page's first hit, None when a fused score placed it."""
    return hits[0].ranked_by if hits else None


def typed_decides(hits: Sequence[Hit], evidence: Evidence) -> bool:
    """Whether the query was corrected and yet, as typed, decided the first hit: then it is
    searched again as typed, and its corrections only offered."""
    return bool(evidence.corrections) and first_tier(hits) in TYPED_TIERS


def did_you_mean(
    manifest: Manifest, query: str, corrections: Sequence[Correction], hits: Sequence[Hit]
) -> str | None:
    """The corrected query to offer, spelled as the page's passages spell the terms, or as a
    few passages of the vault that hold them do when the page does not."""
    offered = known.spelled(corrections, [h.text for h in hits])
    if not all(c.shown for c in offered):
        offered = known.spelled(offered, holding(manifest, [c.term for c in offered]))
    return known.showing(query, offered)


def applied(
    query: str, hits: Sequence[Hit], evidence: Evidence
) -> tuple[tuple[Correction, ...], str | None]:
    """The corrections applied, spelled as the page's first passages spell them, and the
    query as searched (`showing`) when one decided the first hit: it is in the
    corrected-phrase tier, or a corrected word is held by no note at all."""
    corrections = known.spelled(evidence.corrections, [h.text for h in hits[:3]])
    decided = bool(corrections) and (
        first_tier(hits) == "corrected phrase" or bool(evidence.replaced)
    )
    return corrections, known.showing(query, corrections) if decided else None


def holding(manifest: Manifest, terms: Sequence[str], limit: int = SPELLING_PASSAGES) -> list[str]:
    """The texts of a few passages holding one of the index's `terms` (to spell them)."""
    match = " OR ".join(known.quoted(t) for t in dict.fromkeys(terms))
    found = manifest.keyword.chunks_holding(match, limit)
    return [c.chunk.text for c in manifest.notes.chunks_by_id([i for i, _ in found]).values()]
