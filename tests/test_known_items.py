"""Known items: what a person remembers of a note finds it first (vaultd.index.known).

One tiny vault written here, indexed for real once for the module (the model embeds its few
short notes in seconds); each note is a known item with decoys built to outrank it on scores
alone: notes holding the same words more often, or scattered, or meaning the same thing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from typing import Any

import pytest

from tests.small_vault import indexed
from vaultd.answers import Correction, SearchResult
from vaultd.index import known, search
from vaultd.index.open import Index
from vaultd.query import MAX_QUERY_TERMS, Filters, SearchQuery, check_query

NOTES: dict[str, str] = {
    # Stop words inside the phrase: "you can use any valid" is nearly all stop words.
    "Sync/Targets.md": "# Sync targets\n\nYou can use any valid folder as the target.\n",
    "Sync/Plural.md": "# Plural\n\nYou can use any valid folders, or none.\n",
    "Sync/Folders.md": "# Valid folders\n\nA valid folder, any folder: use a valid folder, "
    "a folder you can sync, a target folder or a valid target.\n",
    # Markup inside the phrase: bold, a wikilink with shown text, code.
    "Print/Button.md": "# Printing\n\nPress **the green button** to [[Export|send the file]] "
    "to your `printer`.\n",
    "Print/Printer.md": "# Printer\n\nThe printer: send the file, the green file, the button "
    "of the printer, your printer's green button; press the button to send.\n",
    # Typos, one word each.
    "Photo/Portraits.md": "# Portraits\n\nPortrait photography needs patient lighting and a "
    "steady tripod.\n",
    "Photo/Cameras.md": "# Cameras\n\nPortrait needs: steady lighting, portrait lighting, "
    "steady needs, lighting needs, a portrait.\n",
    # Names: file name, title, alias, path.
    "People/Ada Lovelace.md": "---\naliases: [Enchantress of Numbers]\n---\n# The Countess\n\n"
    "Wrote the first program for the Analytical Engine.\n",
    "People/Engines.md": "# Engines\n\nAda Lovelace and Babbage: Ada Lovelace wrote of the "
    "engine; the countess, the enchantress of numbers, Ada Lovelace.\n",
    # A word only one note holds, among notes meaning the same.
    "Travel/Prague.md": "# Prague\n\nThe old town square, the castle and the bridge at "
    "dawn; the trams; a museum whose guide called it all zymurgy.\n",
    "Brew/Beer.md": "# Brewing beer\n\nBrewing beer: yeast, fermentation, sugar, alcohol. "
    "The chemistry of brewing and fermenting beer.\n",
    "Brew/Wine.md": "# Making wine\n\nWine ferments as yeast eats the sugar of the grapes: "
    "the chemistry of fermentation.\n",
    "Brew/Cider.md": "# Cider\n\nCider: apples, yeast, fermentation and the chemistry of "
    "brewing.\n",
    # A misspelling in one note, the right spelling in many.
    "Kettle/Odd.md": "# Odd\n\nThe kettel went cold.\n",
    **{
        f"Kettle/Step {n}.md": f"# Step {n}\n\nDescaling the kettle, step {n}.\n" for n in range(21)
    },
    # Unspaced script.
    "zh/历史.md": "# 版本历史\n\n查看文件的版本历史。\n",
}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    with indexed(tmp_path_factory.mktemp("known"), NOTES) as idx:
        yield idx


def run(index: Index, query: str, mode: str = "keyword", **kwargs: Any) -> SearchResult:
    return index.searcher.search(SearchQuery(query, mode=mode, **kwargs))  # type: ignore[arg-type]


def first(index: Index, query: str, mode: str = "keyword") -> str:
    return run(index, query, mode).hits[0].path


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_an_unquoted_query_is_a_phrase_with_its_stop_words(index: Index, mode: str) -> None:
    result = run(index, "you can use any valid folder", mode)
    assert result.hits[0].path == "Sync/Targets.md"
    assert result.hits[0].parts["known"] == {"tier": "phrase", "level": known.PHRASE}
    # The same stems, not the same words: below the words as typed.
    assert result.hits[1].path == "Sync/Plural.md"
    assert result.hits[1].parts["known"]["tier"] == "stemmed phrase"


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_markup_inside_a_phrase_is_folded(index: Index, mode: str) -> None:
    hits = run(index, "press the green button to send the file to your printer", mode).hits
    assert hits[0].path == "Print/Button.md"
    assert hits[0].parts["known"]["tier"] == "phrase"


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
@pytest.mark.parametrize(
    ("typed", "word", "term"),
    [
        ("portrait photgraphy needs", "photgraphy", "photographi"),  # a deletion
        ("portrait photoggraphy needs", "photoggraphy", "photographi"),  # an insertion
        ("needs patiemt lighting", "patiemt", "patient"),  # a substitution
        ("a steady tirpod", "tirpod", "tripod"),  # a swap of two letters
    ],
)
def test_each_kind_of_typo_is_corrected_and_explained(
    index: Index, typed: str, word: str, term: str, mode: str
) -> None:
    result = run(index, typed, mode)
    assert result.hits[0].path == "Photo/Portraits.md"
    assert result.hits[0].parts["known"]["tier"] == "corrected phrase"
    correction = {"word": word, "term": term, "edits": 1}
    assert [asdict(c) | {"shown": ""} for c in result.corrections] == [correction | {"shown": ""}]
    assert result.hits[0].parts["corrections"][0]["term"] == term
    shown = result.corrections[0].shown
    assert shown in NOTES["Photo/Portraits.md"].lower()
    assert result.showing == typed.replace(word, shown)


def test_a_correction_is_shown_as_the_page_spells_it_and_never_as_its_stem() -> None:
    typo = Correction(word="photgraphy", term="photographi", edits=1)
    (found,) = known.spelled([typo], ["Portrait photography needs patience."])
    assert found.shown == "photography"
    assert known.showing("portrait photgraphy", [found]) == "portrait photography"
    # The page's passages (vector hits, say) hold no word of the term: nothing to show.
    (missing,) = known.spelled([typo], ["Tripods and lighting for a portrait."])
    assert missing.shown == ""
    assert known.showing("portrait photgraphy", [missing]) is None


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_typo_tolerance_can_be_turned_off(index: Index, mode: str) -> None:
    settings = replace(index.searcher.settings, typos=False)
    result = run(index, "a steady tirpod", mode, settings=settings)
    assert result.corrections == () and result.showing is None
    assert all(h.parts.get("known", {}).get("tier") != "corrected phrase" for h in result.hits)
    assert "corrections" not in result.hits[0].parts


def test_without_known_items_nothing_is_corrected_or_tiered(index: Index) -> None:
    result = run(index, "needs patiemt lighting", known_items=False)
    assert result.corrections == ()
    assert all("known" not in h.parts for h in result.hits)


def test_a_word_most_passages_hold_is_left_out_when_a_rarer_one_is_there(index: Index) -> None:
    searcher = index.searcher
    vocabulary, _ = searcher.lexicon.current()
    # "step" and "kettle": held by the 21 kettle steps, over a third of the passages.
    assert vocabulary.chunks["step"] > vocabulary.rows * search.COMMON_SHARE
    assert searcher.common_words(check_query("descaling step zymurgy")) == {"descaling", "step"}
    hits = run(index, "descaling step zymurgy", k=30).hits
    assert {h.path for h in hits} == {"Travel/Prague.md"}
    # Every word that common: all are searched.
    assert searcher.common_words(check_query("descaling step")) == frozenset()
    assert len(run(index, "descaling step", k=30).hits) > 20
    # The rarer word held by no passage: the common ones are kept.
    assert searcher.common_words(check_query("descaling qwxzvbnmpl")) == frozenset()


def test_a_tier_is_looked_for_inside_the_filter_and_beyond_the_depth(index: Index) -> None:
    hits = run(index, "send the file", filters=Filters.of({"path_prefix": "Print/Printer.md"})).hits
    assert {h.path for h in hits} == {"Print/Printer.md"}
    assert hits[0].parts["known"]["tier"] == "phrase"
    # Two passages hold the phrase, more than the depth of one: the tier is ranked by BM25.
    settings = replace(index.searcher.settings, candidates=1)
    hits = run(index, "send the file", k=1, settings=settings).hits
    assert hits[0].parts["known"]["tier"] == "phrase"


def test_a_word_the_vault_holds_is_never_taken_for_its_commoner_neighbour(index: Index) -> None:
    # One note spells it "kettel", 21 spell it "kettle": what a note holds is what was meant.
    result = run(index, "kettel", k=30)
    assert [h.path for h in result.hits] == ["Kettle/Odd.md"]
    assert result.corrections == () and result.showing is None and result.did_you_mean is None


def test_a_word_no_note_holds_and_nothing_near_is_left_alone(index: Index) -> None:
    result = run(index, "qwxzvbnmpl")
    assert result.hits == () and result.corrections == () and result.showing is None


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
@pytest.mark.parametrize(
    "query", ["ada lovelace", "The Countess", "enchantress of numbers", "people/ada lovelace"]
)
def test_a_notes_name_puts_it_first(index: Index, query: str, mode: str) -> None:
    hits = run(index, query, mode).hits
    assert hits[0].path == "People/Ada Lovelace.md"
    assert hits[0].parts["known"]["tier"] == "name"


def test_a_word_one_note_holds_survives_fusion(index: Index) -> None:
    hits = run(index, "zymurgy", "hybrid", per_note=1).hits
    assert hits[0].path == "Travel/Prague.md"
    assert hits[0].parts["known"]["tier"] == "rare word"
    assert len(hits) > 1  # the vector side's neighbours still fill the page


def test_a_paraphrased_question_ranks_by_fusion(index: Index) -> None:
    hits = run(index, "how does yeast make alcohol from grapes and apples", "hybrid").hits
    assert all("known" not in h.parts for h in hits[:3])


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_unspaced_scripts_are_not_corrected(index: Index, mode: str) -> None:
    result = run(index, "版本厉史", mode)  # one character wrong: its pairs still meet
    assert result.corrections == () and result.showing is None
    assert result.hits[0].path == "zh/历史.md"
    mixed = run(index, "版本历史 photgraphy", mode)
    assert [c.word for c in mixed.corrections] == ["photgraphy"]


def test_a_long_query_stays_within_the_caps(index: Index) -> None:
    # Misspelt words up to the cap of terms: only the first few are corrected.
    bases = ("tripod", "portrait", "camera", "sugar", "cider", "yeast")
    letters = "abcdefghijklmnopqrstuvwxyz"
    typos = [f"{b}{c}" for b in bases for c in letters]
    typos += [f"{c}{b}" for b in bases for c in letters]
    words = typos[:MAX_QUERY_TERMS]
    query = " ".join(words)
    assert check_query(query).term_count() == MAX_QUERY_TERMS
    started = time.monotonic()
    result = run(index, query, "hybrid")
    assert time.monotonic() - started < 10
    corrected = {c.word for c in result.corrections}
    assert 0 < len(corrected) <= known.MAX_CORRECTED_WORDS
    assert len(result.corrections) <= known.MAX_CORRECTED_WORDS * known.MAX_CANDIDATES
    # A pasted passage is found as typed.
    passage = NOTES["Photo/Portraits.md"].split("\n\n")[1]
    assert first(index, passage, "hybrid") == "Photo/Portraits.md"
