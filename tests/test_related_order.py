"""`related` as a reader meets it: the notes in the order of the score it prints, and as the
tie between two notes a passage of theirs, not the footer every note of the vault carries."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner

from tests.conftest import shared_path
from tests.small_vault import indexed, write_vault
from vaultd.cli.commands import main
from vaultd.config import load_config
from vaultd.index.open import Index, open_index
from vaultd.index.related import HOWS


def footer(path: str) -> str:
    """A footer as a publishing tool writes one into every note: the same words, links to
    the note's own address."""
    address = quote(path)
    return (
        "\n\n%% Footer: please do not edit below this line %%\n\n# This note online\n\n"
        f'<span class="footer">[Edit this note](https://example.org/edit/main/{address} '
        f'"edit-note") | [Copy this note](https://example.org/raw/main/{address} "copy-note") '
        '| [Download the whole vault](https://example.org/archive/main.zip "download") </span>\n'
    )


BODIES = {
    "Birds/Gannets.md": "# Gannets\n\nGannets dive into the sea from thirty metres, wings "
    "folded, to catch mackerel and herring.\n\n## Colonies\n\nThousands of gannets nest on "
    "the cliffs of Bass Rock.\n",
    "Birds/Seabirds.md": "# Seabirds\n\nA northern gannet plunges into the water like an arrow "
    "to seize fish.\n\n## Nesting\n\nGannet colonies crowd sea cliffs every spring.\n",
    "Birds/Puffins.md": "# Puffins\n\nPuffins carry a row of sand eels crosswise in their "
    "bills back to their burrows.\n",
    "Office/Spreadsheets.md": "# Spreadsheets\n\nA pivot table sums the sales column by "
    "region and month.\n",
    "Office/Formulas.md": "# Formulas\n\nVLOOKUP finds a row by its key in another sheet; "
    "INDEX and MATCH do it either way.\n",
    "Home/Bread.md": "# Bread\n\nA sourdough loaf needs a lively starter, a long cold proof "
    "and a very hot oven.\n",
}
NOTES = {path: body + footer(path) for path, body in BODIES.items()}


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = write_vault(tmp_path_factory.mktemp("related-order"), NOTES)
    with open_index(load_config(config, env={}), env={}) as opened:
        opened.indexer.reconcile()
    return config


@pytest.fixture
def index(config: Path) -> Iterator[Index]:
    with open_index(load_config(config, env={}), env={}, create=False) as opened:
        yield opened


def printed_scores(config: Path, note: str, how: str) -> list[float]:
    """The scores `vaultd related` prints, in its order."""
    args = ["related", note, "-k", "5", "--how", how, "--config", str(config)]
    shown = CliRunner().invoke(main, args)
    assert shown.exit_code == 0, shown.output
    lines = [line for line in shown.output.splitlines() if re.match(r"\d+\. ", line)]
    assert lines, shown.output
    return [float(re.findall(r"\((?:score )?(-?[\d.]+)\)", line)[-1]) for line in lines]


@pytest.mark.parametrize("note", ["Birds/Seabirds.md", "Office/Formulas.md"])
def test_the_notes_come_in_the_order_of_the_score_printed(config: Path, note: str) -> None:
    for how in HOWS:
        scores = printed_scores(config, note, how)
        assert scores == sorted(scores, reverse=True), (how, scores)


def test_the_json_score_is_the_one_that_ranks(config: Path) -> None:
    args = ["related", "Birds/Seabirds.md", "-k", "5", "--json", "--config", str(config)]
    found = json.loads(CliRunner().invoke(main, args).output)["related"]
    scores = [r["score"] for r in found]
    assert scores == sorted(scores, reverse=True) and 0 < scores[-1] <= scores[0] <= 1
    # A share of the best fused score there is: the gannets, first by meaning and by words.
    assert found[0]["path"] == "Birds/Gannets.md" and scores[0] == pytest.approx(1.0)


@pytest.mark.parametrize("how", HOWS)
def test_the_tie_between_two_notes_is_no_footer_every_note_shares(index: Index, how: str) -> None:
    for path in ("Birds/Seabirds.md", "Office/Formulas.md"):
        for related in index.related.related(path, 3, how=how):
            for passage in (related.source, related.target):
                assert "example.org" not in passage.text, (path, related.path, passage)
                assert passage.section != "This note online", (path, related.path, passage)
    [gannets] = index.related.related("Birds/Seabirds.md", 1)
    assert gannets.path == "Birds/Gannets.md" and "gannet" in gannets.target.text.lower()


#: The smallest notes of one folder of obsidian-hub with a few lines of their own: each also
#: carries the hub's footer (links to its own address on GitHub). A note that is nothing but
#: the footer has nothing else to be tied by.
HUB_FOLDER = "04 - Guides, Workflows, & Courses"
HUB_NOTES = 6
FOOTER = b"%% Hub footer"


def test_on_obsidian_hub_the_tie_is_no_hub_footer(tmp_path: Path) -> None:
    hub = shared_path("corpora", "obsidian-hub")
    footed = [
        p
        for p in (hub / HUB_FOLDER).rglob("*.md")
        if len(p.read_bytes().partition(FOOTER)[0]) > 300 and FOOTER in p.read_bytes()
    ]
    chosen = sorted(footed, key=lambda p: (p.stat().st_size, str(p)))[:HUB_NOTES]
    notes = {str(p.relative_to(hub)): p.read_bytes() for p in chosen}
    with indexed(tmp_path, notes) as index:
        for path in notes:
            for related in index.related.related(path, 3):
                for passage in (related.source, related.target):
                    assert "git-footer" not in passage.text, (path, related.path, passage)
