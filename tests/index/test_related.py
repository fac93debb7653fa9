"""index/related: related notes on a real index, by the stored vectors, Chroma's neighbours and
the link graph; the filters, the lines of a passage, and the pair of passages that ties two
notes (the socket API, the CLI and a running daemon: tests/test_related.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.small_vault import indexed
from vaultd.config import load_config
from vaultd.errors import QueryError, VectorsPendingError
from vaultd.index.open import Index, open_index
from vaultd.index.related import How
from vaultd.query import Filters

NOTES = {
    "Sea/Otters.md": "---\ntags: [animals]\n---\n# Otters\n\nSea otters float on their backs "
    "and crack urchins on their bellies with stones.\n\n## Sleep\n\nThey hold paws while "
    "sleeping so the current does not part them.\n\nSee [[Kelp]].\n",
    "Sea/Kelp.md": "# Kelp\n\nGiant kelp forests shelter fish, urchins and the otters that "
    "eat them; where otters vanish, urchins strip the kelp.\n",
    "Sea/Whales.md": "---\ntags: [animals]\n---\n# Whales\n\nHumpback whales sing long songs "
    "and migrate between feeding and breeding waters in the ocean.\n",
    "Home/Bread.md": "# Bread\n\nA sourdough loaf needs a lively starter, a long cold proof "
    "and a very hot oven.\n",
    "Home/Pizza.md": "# Pizza\n\nNeapolitan pizza dough is flour, water, salt and yeast, "
    "proofed slowly and baked in a blazing oven.\n\n## Sauce\n\nCrushed tomatoes, salt, basil.\n",
    "Work/Taxes.md": "# Taxes\n\nFile the quarterly estimate before the fifteenth and keep "
    "every receipt for deductions.\n",
}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    with indexed(tmp_path_factory.mktemp("related"), NOTES) as opened:
        yield opened


def paths(found: Any) -> list[str]:
    return [r.path for r in found]


@pytest.mark.parametrize("how", ["fused", "coverage", "passages", "centroid"])
def test_the_nearest_notes_by_meaning_come_first(index: Index, how: str) -> None:
    assert paths(index.related.related("Home/Bread.md", 1, how=how)) == ["Home/Pizza.md"]
    found = index.related.related("Sea/Otters.md", 5, how=how)
    assert paths(found)[0] == "Sea/Kelp.md" and "Sea/Otters.md" not in paths(found)
    assert set(paths(found)) <= set(NOTES) and len(found) == 5


def test_by_its_words_a_note_finds_the_notes_sharing_its_terms(index: Index) -> None:
    found = index.related.related("Sea/Otters.md", 3, how="words")
    # Kelp shares "urchins", "otters" and "kelp"; nothing of the bakery or the taxes does.
    assert paths(found)[0] == "Sea/Kelp.md"
    assert not {"Home/Bread.md", "Work/Taxes.md"} & set(paths(found))


def test_each_result_has_the_pair_of_passages_that_ties_them(index: Index) -> None:
    [kelp] = index.related.related("Sea/Otters.md", 1)
    assert kelp.linked is True  # Otters links [[Kelp]]
    assert 0 < kelp.similarity <= 1 and kelp.score > 0
    assert kelp.source.text in NOTES["Sea/Otters.md"] and kelp.source.start_line >= 1
    assert kelp.target.text.startswith("Giant kelp") and kelp.title == "Kelp"
    # Either way: the kelp note is linked from the otters, so the otters are linked to it.
    assert index.related.related("Sea/Kelp.md", 1)[0].linked is True


def test_linked_notes_can_be_left_out_and_the_filters_hold(index: Index) -> None:
    unlinked = index.related.related("Sea/Otters.md", 5, exclude_linked=True)
    assert "Sea/Kelp.md" not in paths(unlinked)
    animals = index.searcher.select(Filters.of({"tags": ["animals"]}))
    assert paths(index.related.related("Sea/Kelp.md", 5, allowed=animals)) == [
        "Sea/Otters.md",
        "Sea/Whales.md",
    ]
    home = index.searcher.select(Filters.of({"path_prefix": "Home"}))
    assert set(paths(index.related.related("Work/Taxes.md", 5, allowed=home))) == {
        "Home/Bread.md",
        "Home/Pizza.md",
    }


LICENCE = (
    "\n\n## Licence\n\nThis note is shared under the Creative Commons Attribution 4.0 "
    "International licence. You are free to copy and redistribute the material in any medium "
    "or format, and to remix, transform and build upon it for any purpose, even commercially, "
    "as long as you give appropriate credit, provide a link to the licence, and indicate if "
    "changes were made. You may not apply legal terms or technological measures that legally "
    "restrict others from doing anything the licence permits.\n"
)
#: One title for all and no H1 (the model sees the heading path before each passage), so the
#: footers' vectors are the same.
TITLED = "---\ntitle: Notes\n---\n"
FOOTERS = {
    "Seabirds.md": TITLED + "Gannets dive into the sea from thirty metres, wings folded, "
    "to catch mackerel.\n\n## Colonies\n\nThousands of gannets nest on the cliffs of Bass "
    "Rock, each pair on its own patch of guano.\n\n## Flight\n\nThey glide low over the "
    "waves on long narrow wings." + LICENCE,
    "Gannets.md": TITLED + "A northern gannet plunges into the water like an arrow to seize "
    "fish.\n\n## Nesting\n\nGannet colonies crowd sea cliffs and islands every spring.\n",
    "Spreadsheets.md": TITLED + "A pivot table sums the sales column by region and "
    "month.\n\n## Formulas\n\nVLOOKUP finds a row by its key in another sheet." + LICENCE,
}


def test_coverage_is_not_fooled_by_one_shared_passage(tmp_path: Path) -> None:
    # The licence footer is the two notes' best pair by far; the rest has nothing in common.
    with indexed(tmp_path, FOOTERS) as opened:
        related = opened.related.related
        assert paths(related("Seabirds.md", 1, how="passages")) == ["Spreadsheets.md"]
        assert paths(related("Seabirds.md", 1, how="coverage")) == ["Gannets.md"]


def test_a_passage_of_a_note_by_its_lines(index: Index) -> None:
    # Line 7 of the pizza note is its sauce; lines 1-4 its dough, nearest the bread.
    sauce = index.related.related("Home/Pizza.md", 5, lines=(5, 7))
    assert sauce and all(r.source.start_line == 7 for r in sauce)
    dough = index.related.related("Home/Pizza.md", 1, lines=(1, 4))
    assert paths(dough) == ["Home/Bread.md"] and dough[0].source.end_line <= 4
    with pytest.raises(QueryError, match="no indexed passage in lines 40-50"):
        index.related.related("Home/Pizza.md", 3, lines=(40, 50))
    with pytest.raises(QueryError, match="not an indexed note"):
        index.related.related("Nowhere.md", 3)


def test_a_note_awaiting_its_vectors_says_so(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    for name in ("a.md", "b.md"):
        (vault / name).write_text(f"# {name}\n\nWords of {name} about rivers.\n", encoding="utf-8")
    config = tmp_path / "c.toml"
    config.write_text(
        f'[vault]\npath = "{vault}"\n[store]\npath = "{tmp_path / "data"}"\n', encoding="utf-8"
    )

    class Stop(Exception):
        pass

    def stop_before_embedding(phase: str, done: int, total: int) -> None:
        if phase == "embed":
            raise Stop

    with open_index(load_config(config, env={}), env={}) as opened:
        with pytest.raises(Stop):
            opened.indexer.reconcile(stop_before_embedding)
        with pytest.raises(VectorsPendingError, match="awaits its vectors"):
            opened.related.related("a.md", 3)
        opened.indexer.reconcile()
        assert paths(opened.related.related("a.md", 3)) == ["b.md"]


def test_as_many_notes_as_asked_for(tmp_path: Path) -> None:
    # Each ranking is fused from its top 15 by default; asking for more fuses deeper.
    many = {
        f"n{i:02d}.md": f"# Note {i}\n\nThe tide at harbour {i} rose past the pier at dawn.\n"
        for i in range(35)
    }
    with indexed(tmp_path, many) as opened:
        hows: tuple[How, ...] = ("fused", "coverage")
        for how in hows:
            found = paths(opened.related.related("n00.md", 34, how=how))
            assert len(found) == 34 and set(found) == set(many) - {"n00.md"}, how
