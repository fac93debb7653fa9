"""Typo corrections that cannot make a search worse (vaultd.index.known, docs/search.md).

The queries are ones real corrections spoiled: a word the vault holds in another form, a word
of the language no note holds, a stop word. One small vault, indexed for real once for the
module; the "did you mean" offer is checked in process, through a real daemon's CLI and
through `vaultd mcp`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from harness.daemon import PATIENCE, RunningDaemon, running
from tests.small_vault import indexed
from vaultd.answers import SearchResult
from vaultd.index.open import Index
from vaultd.query import SearchQuery

NOTES: dict[str, str] = {
    # "die" and "died" are held, "does" is not: "does" was corrected to "died" (as "dies").
    "Heart/Cholesterol.md": "# Cholesterol\n\nParticle size of LDL cholesterol matters for "
    "the heart; patients who died early had small particles. Some die young.\n",
    # "cri" is held (the syndrome), "crib" is not.
    "Infants/Cri du chat.md": "# Cri du chat\n\nCri du chat syndrome: a cry like a cat's; "
    "sudden infant death is another matter.\n",
    # "tart" is held, "taro" is not.
    "Food/Tart.md": "# Tart\n\nA fruit tart has more sugar than a root vegetable.\n",
    # "leek" in two notes, "weeks" in many more: "leeks" was corrected to "weeks".
    "Food/Leek soup.md": "# Leek soup\n\nA leek, potatoes and stock.\n",
    "Food/Allium.md": "# Allium\n\nOnion, garlic and leek are alliums.\n",
    **{
        f"Recovery/Week {n}.md": f"# Week {n}\n\nRecovery takes weeks; week {n} of rest.\n"
        for n in range(45)
    },
    # The vault says "accidentally", whose term is "accident"; "accident" itself stems to
    # "accid", which no passage holds: "by accident" was answered as "by accidental".
    "Files/Recover.md": "# Recover deleted files\n\nIf you deleted a file accidentally, "
    "restore it from the trash or from file recovery.\n",
    # A note whose file name is misspelt, whose title is not: "kyotto" is its name as typed.
    "Trips/Kyotto.md": "# Kyoto trip\n\nTemples and gardens in Kyoto in spring.\n",
    "Trips/Osaka.md": "# Osaka trip\n\nStreet food in Osaka; a day trip to Kyoto.\n",
}

#: Queries whose every word the vault holds in some form or the language knows.
REAL_WORDS = [
    "does cholesterol size matter",
    "crib death",
    "taro",
    "leeks",
    "how do I get back a file I deleted by accident",
]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    with indexed(tmp_path_factory.mktemp("corrections"), NOTES) as idx:
        yield idx


def run(index: Index, query: str, mode: str = "hybrid") -> SearchResult:
    return index.searcher.search(SearchQuery(query, k=100, mode=mode, per_note=1))  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
@pytest.mark.parametrize("query", REAL_WORDS)
def test_a_word_the_vault_or_the_language_knows_is_never_corrected(
    index: Index, query: str, mode: str
) -> None:
    result = run(index, query, mode)
    assert result.corrections == ()
    assert result.showing is None and result.did_you_mean is None
    assert all("corrections" not in h.parts for h in result.hits)


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_a_word_the_vault_holds_finds_its_notes_not_its_neighbours(index: Index, mode: str) -> None:
    hits = run(index, "leeks", mode).hits
    assert {h.path for h in hits[:2]} == {"Food/Leek soup.md", "Food/Allium.md"}


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_a_typo_that_finds_nothing_decisive_is_still_corrected(index: Index, mode: str) -> None:
    result = run(index, "tempels and gardens", mode)
    assert result.hits[0].path == "Trips/Kyotto.md"
    assert [c.word for c in result.corrections] == ["tempels"]
    assert result.showing == "temples and gardens" and result.did_you_mean is None


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_a_decisive_typed_query_is_searched_as_typed_and_the_correction_offered(
    index: Index, mode: str
) -> None:
    result = run(index, "kyotto", mode)
    assert result.hits[0].path == "Trips/Kyotto.md"
    assert result.hits[0].parts["known"]["tier"] == "name"
    assert result.corrections == () and result.showing is None
    assert result.did_you_mean == "kyoto"
    # Searched as typed: no hit was found by the correction.
    assert all("corrections" not in h.parts for h in result.hits)


# -- the offer through the socket API, the CLI and MCP ---------------------------------------------


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    root = tmp_path_factory.mktemp("offer")
    vault = root / "vault"
    for path in ("Trips/Kyotto.md", "Trips/Osaka.md", "Food/Tart.md"):
        (vault / path).parent.mkdir(parents=True, exist_ok=True)
        (vault / path).write_text(NOTES[path], encoding="utf-8")
    with running(vault, root) as daemon:
        yield daemon


def cli(daemon: RunningDaemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vaultd", "search", "--config", str(daemon.config), *args],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=True,
    )


@pytest.mark.slow
def test_the_cli_says_did_you_mean_and_the_api_field_holds_it(daemon: RunningDaemon) -> None:
    shown = cli(daemon, "kyotto")
    assert "did you mean: kyoto" in shown.stdout.splitlines()
    answer = json.loads(cli(daemon, "kyotto", "--json").stdout)
    assert answer["did_you_mean"] == "kyoto" and answer["corrections"] == []
    assert answer["hits"][0]["path"] == "Trips/Kyotto.md"
    plain = json.loads(cli(daemon, "taro", "--json").stdout)
    assert plain["did_you_mean"] is None and plain["corrections"] == []
    assert "did you mean" not in cli(daemon, "taro").stdout


@pytest.mark.slow
def test_mcp_search_offers_did_you_mean(daemon: RunningDaemon) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "vaultd", "mcp", "--config", str(daemon.config)]
    )

    async def main() -> Any:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await session.call_tool("search", {"query": "kyotto", "k": 3})

    result = anyio.run(main)
    assert not result.is_error, result.content
    found = result.structured_content or json.loads(result.content[0].text)
    assert found["did_you_mean"] == "kyoto"
    assert found["hits"][0]["path"] == "Trips/Kyotto.md"
