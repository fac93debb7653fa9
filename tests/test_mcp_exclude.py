"""`[mcp] exclude` keeps a folder, a tag and a kind of file from every MCP tool, with a daemon
and without one, while `vaultd search` still finds them: a real `vaultd mcp` over stdio."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

from harness.daemon import PATIENCE, running
from tests.test_attachments import canvas

TOKEN = "ntn_4815162342secret"
NOTES = {
    "Otter.md": "# Otter\n\nOtters hold hands while they sleep.\n\n"
    "See [[Private/Token]] and [[Secret plans]].\n",
    "Kelp.md": "# Kelp\n\nAn otter wraps itself in kelp to sleep.\n",
    "Private/Token.md": f"# Token\n\nThe otter integration token is {TOKEN}.\n",
    "Secret plans.md": "---\ntags: [secret/heist]\n---\n# Secret plans\n\n"
    f"Ask [[Otter]] for {TOKEN} before the otter heist.\n",
    "Board.canvas": canvas(
        [
            {"id": "c1", "type": "text", "text": f"otter board {TOKEN}", "x": 0, "y": 0}
            | {"width": 300, "height": 90}
        ]
    ),
}
EXCLUDED = ("Private/Token.md", "Secret plans.md", "Board.canvas")
CONFIG = '\n[mcp]\nexclude = ["Private/**", "#secret", "kind:canvas"]\n'


def result(answer: Any) -> Any:
    if answer.is_error:
        return {"error": answer.content[0].text}
    return answer.structured_content


def every_tool(config: Path) -> dict[str, Any]:
    """Each MCP tool's answer, asked as an assistant would about the otter notes."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "vaultd", "mcp", "--config", str(config)]
    )
    calls: dict[str, tuple[str, dict[str, Any]]] = {
        "search": ("search", {"query": "otter token", "k": 20}),
        "search snippets": ("search", {"query": TOKEN, "k": 20, "snippets": True}),
        # A typo of a word only an excluded note holds: no correction may name it.
        "search typo": ("search", {"query": "otter heisst", "k": 20}),
        "read excluded": ("read_note", {"path": "Private/Token.md"}),
        "read by name": ("read_note", {"path": "Token"}),
        "read tagged": ("read_note", {"path": "Secret plans"}),
        "read canvas": ("read_note", {"path": "Board.canvas"}),
        "links": ("links", {"path": "Otter"}),
        "links excluded": ("links", {"path": "Secret plans"}),
        "related": ("related", {"path": "Otter", "k": 20}),
        "related excluded": ("related", {"path": "Private/Token.md"}),
        "mentions": ("unlinked_mentions", {"path": "Otter"}),
        "mentions excluded": ("unlinked_mentions", {"path": "Token"}),
        "backlinks": ("backlinks", {"path": "Otter"}),
        "backlinks excluded": ("backlinks", {"path": "Private/Token.md"}),
        "outline excluded": ("outline", {"path": "Private/Token.md"}),
        "tags": ("tags", {}),
        "recent": ("recent_notes", {"k": 50}),
    }

    async def main() -> dict[str, Any]:
        with anyio.fail_after(PATIENCE):
            async with (
                stdio_client(params) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                return {
                    name: result(await session.call_tool(tool, arguments))
                    for name, (tool, arguments) in calls.items()
                }

    return anyio.run(main)


def paths_in(found: Any) -> set[str]:
    """Every note an answer names: its `path` fields, and backlinks listed by path."""
    if isinstance(found, dict):
        named = {found["path"]} if isinstance(found.get("path"), str) else set()
        backlinks = found.get("backlinks")
        if isinstance(backlinks, list):
            named |= {b for b in backlinks if isinstance(b, str)}
        return named.union(*(paths_in(v) for v in found.values()))
    if isinstance(found, list):
        return set().union(*(paths_in(v) for v in found))
    return set()


def assert_kept_out(found: dict[str, Any]) -> None:
    # Not one excluded note named, nor a word of theirs (Otter.md's own text links to them).
    assert not paths_in(found) & set(EXCLUDED), found
    assert TOKEN not in json.dumps(found)
    assert "heist" not in json.dumps(found).replace("heisst", "")
    assert not [t for t in found["tags"]["tags"] if t["tag"].startswith("secret")]
    # The notes not excluded are still answered about.
    assert {h["path"] for h in found["search"]["hits"]} >= {"Otter.md", "Kelp.md"}
    assert "Kelp.md" in {r["path"] for r in found["related"]["related"]}
    assert [m["path"] for m in found["mentions"]["mentions"]] == ["Kelp.md"]
    assert found["backlinks"]["backlinks"] == []
    assert {n["path"] for n in found["recent"]["notes"]} == {"Otter.md", "Kelp.md"}
    # An excluded note reads as one not indexed, asked by path or by name, for every tool.
    for name in (
        "read excluded",
        "read by name",
        "read tagged",
        "read canvas",
        "links excluded",
        "related excluded",
        "mentions excluded",
        "backlinks excluded",
        "outline excluded",
    ):
        assert "no indexed note" in found[name]["error"], (name, found[name])


def cli_search(config: Path) -> set[str]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "vaultd",
            "search",
            TOKEN,
            "-k",
            "20",
            "--json",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=True,
    ).stdout
    return {hit["path"] for hit in json.loads(out)["hits"]}


def exported(config: Path) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-m", "vaultd", "export", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=True,
    ).stdout
    return {json.loads(line)["metadata"]["path"] for line in out.splitlines() if line.strip()}


def test_mcp_exclude_keeps_notes_from_every_tool_with_and_without_a_daemon(
    tmp_path: Path,
) -> None:
    vault = tmp_path / "vault"
    for path, text in NOTES.items():
        (vault / path).parent.mkdir(parents=True, exist_ok=True)
        (vault / path).write_text(text, encoding="utf-8")
    with running(vault, tmp_path, extra=CONFIG) as daemon:
        assert_kept_out(every_tool(daemon.config))
        # The user's own search is not an AI tool: it finds them all.
        assert cli_search(daemon.config) >= set(EXCLUDED)
        # An export is given what an assistant is given.
        assert exported(daemon.config) == {"Otter.md", "Kelp.md"}
    # No daemon: the bridge answers from the index, under the same rules.
    assert_kept_out(every_tool(daemon.config))
    assert cli_search(daemon.config) >= set(EXCLUDED)
    assert exported(daemon.config) == {"Otter.md", "Kelp.md"}
