"""index/known: the known-item evidence of a query (a note's name, the words in order, typos
corrected, a rare word) read from the real manifest's keyword index."""

from __future__ import annotations

import time

import pytest

from tests.storage.outcomes import written
from vaultd.index import known
from vaultd.query import check_query, has_phrase
from vaultd.storage.manifest import Manifest

KEEPER = "Lighthouse Keeper.md#0"


@pytest.fixture
def vault(manifest: Manifest) -> Manifest:
    manifest.apply(
        [
            written("Lighthouse Keeper.md", ["the keeper climbs the lighthouse stairs at dusk"]),
            written("b.md", ["gulls wheel over the pier"]),
            written("c.md", ["the pier at dusk"]),
        ]
    )
    return manifest


def gather(manifest: Manifest, query: str, *, typos: bool = True) -> known.Evidence:
    parsed = check_query(query)
    return known.gather(manifest, known.Lexicon(manifest), query, parsed, 10, None, typos=typos)


def test_a_note_named_by_the_query_is_named(vault: Manifest) -> None:
    evidence = gather(vault, "lighthouse keeper")
    assert evidence.named == ("Lighthouse Keeper.md",)
    assert evidence.tier(KEEPER, "Lighthouse Keeper.md", "") == known.NAME


def test_the_words_in_order_make_the_phrase_tier(vault: Manifest) -> None:
    evidence = gather(vault, "keeper climbs")
    assert evidence.named == ()
    assert evidence.chunks[known.PHRASE] == {KEEPER}
    assert evidence.tier(KEEPER, "x.md", "the keeper climbs") == known.PHRASE
    assert evidence.tier("b.md#0", "b.md", "gulls wheel over the pier") == 0


def test_a_typo_is_corrected_to_a_word_the_vault_holds(vault: Manifest) -> None:
    evidence = gather(vault, "lighthose stairs")
    assert [(c.word, c.edits) for c in evidence.corrections] == [("lighthose", 1)]
    assert evidence.chunks[known.CORRECTED] == {KEEPER}
    assert evidence.replaced == ("lighthose",)
    page = known.spelled(evidence.corrections, ["The lighthouse keeper climbs the stairs."])
    assert known.showing("lighthose stairs", page) == "lighthouse stairs"

    assert gather(vault, "lighthose stairs", typos=False).corrections == ()


def test_a_word_few_notes_hold_is_rare_evidence(vault: Manifest) -> None:
    assert gather(vault, "gulls").chunks[known.RARE] == {"b.md#0"}


def test_the_word_helpers() -> None:
    assert known.display("[[target|shown]] and [text](https://x)") == "shown and text"
    assert known.query_words('"the keeper" climbs the') == ("the", "keeper", "climbs", "the")
    assert [known.edits_allowed(w) for w in ("pier", "keeper", "lighthouses")] == [0, 1, 2]
    edits = known.one_edit("cat")
    assert {"at", "act", "cut", "cart"} <= edits and "cat" not in edits


@pytest.mark.parametrize(
    ("text", "phrase", "held"),
    [
        ("Cafe\u0301 au lait, twice", "cafe au lait", True),  # a mark written apart
        ("Café au lait, twice", "CAFE au lait", True),
        ("the naïve view’s end", "naive view", True),
        ("the naïve view’s end", "naive views", False),
        ("a straße to walk", "strasse to", True),  # casefolded before the letters are compared
        ("plain ascii text here", "ascii text", True),
        ("plain ascii text here", "ascii here", False),
        ("日本語のテキスト and more", "and more", True),
    ],
)
def test_has_phrase_folds_case_and_accents_and_misses_a_missing_word(
    text: str, phrase: str, held: bool
) -> None:
    assert has_phrase(text, phrase) is held


def test_display_leaves_text_without_links_as_it_is() -> None:
    text = "a [bracket] and (parens) [^1]"
    assert known.display(text) == text
    assert known.display("[[a]] and [[b|B]]") == "[[a]] and B"


@pytest.mark.parametrize(
    ("symbol", "name", "defined"),
    [
        ("contract ERC20 > function transfer", "transfer", True),
        ("contract ERC20 > function transfer", "ERC20", False),  # the outer symbol's
        ("contract ERC20", "erc20", True),
        ("module Data.Map > insertWith", "insertWith", True),
        ("[tool.ruff]", "tool.ruff", True),
        ("impl Display for Widget", "Widget", True),
        ("function transfer", "function", False),  # a keyword names nothing
    ],
)
def test_a_symbol_path_defines_the_name_of_its_last_part(
    symbol: str, name: str, defined: bool
) -> None:
    assert known.defines(symbol, name) is defined


def test_the_lexicon_knows_first_passages_and_counts_notes_written_since_from_the_manifest(
    vault: Manifest,
) -> None:
    lexicon = known.Lexicon(vault)
    assert lexicon.first_passages() == {KEEPER, "b.md#0", "c.md#0"}
    assert lexicon.passage_counts(["b.md", "gone.md"]) == {"b.md": 1}

    vault.apply([written("d.md", ["one", "two", "three"])])
    # Whether or not the snapshot was read again by now (on a thread of its own), a note
    # written since is counted.
    assert lexicon.passage_counts(["d.md", "b.md"]) == {"d.md": 3, "b.md": 1}


def test_the_lexicon_reads_its_snapshot_again_after_a_write(vault: Manifest) -> None:
    lexicon = known.Lexicon(vault)
    lexicon.first_passages()
    vault.apply([written("d.md", ["one", "two"])])
    deadline = time.monotonic() + 60
    while "d.md#0" not in lexicon.first_passages():
        assert time.monotonic() < deadline, "the snapshot was never read again"
        time.sleep(0.05)
    assert lexicon.passage_counts(["d.md"]) == {"d.md": 2}
