"""Search hits say where the query's words are as ranges, never as markup (issue 52, point 1):
a note writes bold as `**bold**` too, so markers inserted into its text could not be told from
its own. The text returned is the note's, unchanged; `highlights` are [start, end) ranges in
Unicode code points into it. Checked through each way in: the API, the CLI on a terminal (a
pty) and piped, and a real MCP client of `vaultd mcp`. (The page: tests/test_ui_browser.py.)
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from mcp import ClientSession

from harness.daemon import PATIENCE, RunningDaemon, running
from tests.highlighted import NOTE, PATH, QUERIES, check_hit
from tests.mcp_session import VAULTD, session

pytestmark = pytest.mark.slow

NOTES = {
    PATH: NOTE,
    "Other.md": "# Other\n\nA note about tides and the moon, with nothing bold in it.\n",
}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    root = tmp_path_factory.mktemp("highlights")
    vault = root / "vault"
    vault.mkdir()
    for path, text in NOTES.items():
        (vault / path).write_text(text, encoding="utf-8")
    with running(vault, root) as d:
        yield d


def layouts(hits: list[dict[str, Any]]) -> dict[str, Any]:
    return next(h for h in hits if h["path"] == PATH)


@pytest.mark.parametrize("snippets", [True, False])
@pytest.mark.parametrize("query", list(QUERIES))
def test_the_api_gives_ranges_of_the_matched_words_only(
    daemon: RunningDaemon, query: str, snippets: bool
) -> None:
    hit = layouts(daemon.search(query, k=5, mode="keyword", snippets=snippets))
    check_hit(hit, QUERIES[query])
    if not snippets:
        assert hit["text"] in NOTE


# -- the CLI ----------------------------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: Bold as click.style writes it, up to the reset.
BOLD_ANSI = re.compile(r"\x1b\[1m(.*?)\x1b\[0m")


def cli(daemon: RunningDaemon, *args: str, terminal: bool, env: dict[str, str]) -> str:
    """`vaultd search ARGS` against the daemon, its stdout a pty or a pipe; what it printed."""
    command = [VAULTD, "search", *args, "--config", str(daemon.config)]
    environment = {**os.environ, "TERM": "xterm", **env}
    if not terminal:
        done = subprocess.run(
            command, capture_output=True, env=environment, timeout=PATIENCE, check=True
        )
        return done.stdout.decode()
    leader, follower = pty.openpty()
    out = b""
    with subprocess.Popen(
        command, stdout=follower, stderr=subprocess.PIPE, env=environment
    ) as process:
        os.close(follower)
        try:
            while True:
                ready, _, _ = select.select([leader], [], [], PATIENCE)
                assert ready, f"no output within {PATIENCE} s: {out!r}"
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # EIO: the process closed its end
                    break
                if not chunk:
                    break
                out += chunk
        finally:
            os.close(leader)
        _, errors = process.communicate(timeout=PATIENCE)
    assert process.returncode == 0, errors.decode()
    return out.decode().replace("\r\n", "\n")


def snippet_line(output: str) -> str:
    """The text line under Layouts.md's hit."""
    lines = output.splitlines()
    at = next(i for i, line in enumerate(lines) if "Layouts.md" in ANSI.sub("", line))
    return lines[at + 1]


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("query", list(QUERIES))
def test_the_cli_on_a_terminal_bolds_the_matched_words_only(
    daemon: RunningDaemon, query: str
) -> None:
    hit = layouts(daemon.search(query, k=5, mode="keyword", snippets=True))
    for snippets in (["--snippets"], []):
        line = snippet_line(
            cli(daemon, query, "--mode", "keyword", *snippets, terminal=True, env={})
        )
        assert [m for m in BOLD_ANSI.findall(line)] == sorted(QUERIES[query]), repr(line)
        plain = ANSI.sub("", line).strip()
        assert plain.rstrip("…") in flat(NOTE)  # the note's words, its own `**` as they are
        if snippets:
            assert plain == flat(hit["snippet"])


@pytest.mark.parametrize("query", list(QUERIES))
def test_the_cli_piped_or_with_no_color_prints_the_text_unmarked(
    daemon: RunningDaemon, query: str
) -> None:
    hit = layouts(daemon.search(query, k=5, mode="keyword", snippets=True))
    for terminal, env in ((False, {}), (True, {"NO_COLOR": "1"})):
        out = cli(daemon, query, "--mode", "keyword", "--snippets", terminal=terminal, env=env)
        line = snippet_line(out)
        assert "\x1b[" not in line, repr(line)
        assert line.strip().strip("…") in flat(NOTE)  # nothing inserted
        assert line.strip() == flat(hit["snippet"])


def test_the_cli_json_carries_the_ranges(daemon: RunningDaemon) -> None:
    out = cli(daemon, "setCharSpace", "--snippets", "--json", terminal=False, env={})
    check_hit(layouts(json.loads(out)["hits"]), QUERIES["setCharSpace"])


# -- MCP --------------------------------------------------------------------------------------


def test_mcp_gives_clean_text_and_the_ranges_in_its_structured_content(
    daemon: RunningDaemon,
) -> None:
    async def steps(client: ClientSession, hello: Any) -> list[Any]:
        return [
            await client.call_tool("search", {"query": q, "k": 5, "mode": "keyword", **more})
            for q in QUERIES
            for more in ({"snippets": True}, {})
        ]

    results = session(["mcp", "--config", str(daemon.config)], steps)
    asked = [(q, s) for q in QUERIES for s in (True, False)]
    for (query, snippets), result in zip(asked, results, strict=True):
        assert not result.is_error, result.content
        hit = layouts(result.structured_content["hits"])
        assert ("snippet" in hit) is snippets
        check_hit(hit, QUERIES[query])
        # The text content says the same as the structured content: no markup added there.
        said = layouts(json.loads(result.content[0].text)["hits"])
        assert said["highlights"] == hit["highlights"]


def test_a_word_corrected_for_a_typo_is_highlighted_as_the_search_matched_it(
    daemon: RunningDaemon,
) -> None:
    for snippets in (True, False):
        hit = layouts(daemon.search("saffon", k=5, mode="keyword", snippets=snippets))
        check_hit(hit, {"saffron"})


def test_the_ranges_are_declared_once_and_described_where_clients_read() -> None:
    """The document and the MCP instructions say what the ranges count: code points."""
    from vaultd.api.openapi import model_schema
    from vaultd.api.operations import SearchResponse
    from vaultd.cli.mcp_bridge import INSTRUCTIONS

    hits = model_schema(SearchResponse)["properties"]["hits"]["items"]
    ranges = hits["properties"]["highlights"]
    assert ranges["items"]["minItems"] == ranges["items"]["maxItems"] == 2
    assert "code points" in ranges["description"] and "UTF-16" in ranges["description"]
    assert "highlights" in INSTRUCTIONS and "code points" in INSTRUCTIONS
