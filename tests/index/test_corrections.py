"""index/corrections: replace or offer. A query whose first hit the words as typed decided has
its corrections offered, spelled as the vault spells them; otherwise they are applied, and
shown when one decided the first hit."""

from __future__ import annotations

from tests.storage.outcomes import written
from vaultd.answers import Correction, Hit, KnownTier
from vaultd.index import corrections, known
from vaultd.index.known import Evidence
from vaultd.storage.manifest import Manifest

TERM = known.stems_of(["lighthouse"])["lighthouse"]
TYPO = Correction(word="lighthose", term=TERM, edits=1)


def hit(text: str, tier: KnownTier | None = None) -> Hit:
    return Hit(
        id="a.md#0",
        path="a.md",
        title="a",
        section="",
        start_line=1,
        end_line=1,
        score=1.0,
        text=text,
        tags=(),
        indexed=True,
        kind="note",
        ranked_by=tier,
    )


def test_only_a_corrected_query_the_typed_words_decided_is_searched_as_typed() -> None:
    corrected = Evidence(corrections=(TYPO,))
    for tier in corrections.TYPED_TIERS:
        assert corrections.typed_decides([hit("x", tier)], corrected)
    assert not corrections.typed_decides([hit("x", "corrected phrase")], corrected)
    assert not corrections.typed_decides([hit("x")], corrected)
    assert not corrections.typed_decides([], corrected)
    assert not corrections.typed_decides([hit("x", "phrase")], Evidence())


def test_an_applied_correction_is_shown_only_when_it_decided_the_first_hit() -> None:
    text = "The lighthouse keeper climbs the stairs."
    applied, showing = corrections.applied(
        "lighthose stairs", [hit(text, "corrected phrase")], Evidence(corrections=(TYPO,))
    )
    assert [c.shown for c in applied] == ["lighthouse"]
    assert showing == "lighthouse stairs"

    applied, showing = corrections.applied(
        "lighthose stairs", [hit(text, "proximity")], Evidence(corrections=(TYPO,))
    )
    assert [c.shown for c in applied] == ["lighthouse"]
    assert showing is None
    # A word no note holds was replaced: every match of it is the correction's.
    replaced = Evidence(corrections=(TYPO,), replaced=("lighthose",))
    assert corrections.applied("lighthose stairs", [hit(text)], replaced)[1] == "lighthouse stairs"


def test_an_offer_the_page_does_not_spell_is_spelled_from_the_vault(manifest: Manifest) -> None:
    manifest.apply([written("k.md", ["the old lanterns at dusk"])])
    typo = Correction(word="lantrns", term=known.stems_of(["lanterns"])["lanterns"], edits=1)
    page = [hit("Lantrns is a note of its own name.", "name")]
    assert corrections.holding(manifest, [typo.term]) == ["the old lanterns at dusk"]
    assert corrections.did_you_mean(manifest, "old lantrns", [typo], page) == "old lanterns"
