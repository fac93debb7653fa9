"""`vaultd mcp` for real: a daemon on a vault, the bridge as a subprocess, the SDK's own client."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from harness.daemon import (
    PATIENCE,
    RunningDaemon,
    fault_env,
    running,
    short_socket_dir,
    wait_until,
)
from tests.mcp_session import VAULTD
from tests.small_vault import write_vault
from vaultd.api.limits import MAX_BODY
from vaultd.cli.mcp_stdio import DRAIN
from vaultd.errors import EXIT_FAILURE
from vaultd.query import MAX_QUERY_CHARS

pytestmark = pytest.mark.slow

NOTES = {
    "Animals/Otter.md": "# Otter\n\nOtters hold hands while they sleep so they do not drift "
    "apart.\n\n## Diet\n\nMostly fish, crabs and sea urchins.\n\nSee [[Kelp forest]].\n",
    "Kelp forest.md": "# Kelp forest\n\nUnderwater forests of giant kelp shelter many animals.\n",
    "Garden.md": "---\ntags: [garden/veg]\n---\n# Garden\n\nTomatoes want the south wall and "
    "plenty of water.\n\nAn otter came up from the pond at dusk.\n",
    "Private/Diary.md": "# Diary\n\nThe otters were out again today.\n",
}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    root = tmp_path_factory.mktemp("mcp")
    vault = root / "vault"
    for path, text in NOTES.items():
        (vault / path).parent.mkdir(parents=True, exist_ok=True)
        (vault / path).write_text(text, encoding="utf-8")
    (vault / ".gitignore").write_text("Private/\n", encoding="utf-8")
    with running(vault, root) as daemon:
        yield daemon


def call(daemon: RunningDaemon, steps: Any) -> Any:
    """Start `vaultd mcp` for this daemon's config and run `steps(session)` against it."""
    return call_with_config(daemon.config, steps)


def call_with_config(config: Path, steps: Any) -> Any:
    """Start `vaultd mcp --config CONFIG` as a real MCP client does (env None: the SDK's
    default environment) and run `steps(session)` against it."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "vaultd", "mcp", "--config", str(config)]
    )

    async def main() -> Any:
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await steps(session)

    return anyio.run(main)


def payload(result: Any) -> Any:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


def test_an_assistant_lists_the_tools_searches_and_reads(daemon: RunningDaemon) -> None:
    async def steps(session: ClientSession) -> dict[str, Any]:
        tools = await session.list_tools()
        found = await session.call_tool("search", {"query": "why do otters hold hands", "k": 3})
        hit = payload(found)["hits"][0]
        lines = await session.call_tool(
            "read_note",
            {"path": hit["path"], "start_line": hit["start_line"], "end_line": hit["end_line"]},
        )
        whole = await session.call_tool("read_note", {"path": "Animals/Otter.md"})
        links = await session.call_tool("links", {"path": "Kelp forest.md"})
        private = await session.call_tool("read_note", {"path": "Private/Diary.md"})
        escape = await session.call_tool("read_note", {"path": "../vaultd.toml"})
        out_of_range = await session.call_tool(
            "read_note", {"path": "Animals/Otter.md", "start_line": 50}
        )
        tagged = await session.call_tool(
            "search", {"query": "tomatoes", "path_prefix": "Animals", "mode": "keyword"}
        )
        return {
            "tools": {t.name: t for t in tools.tools},
            "hit": hit,
            "lines": payload(lines),
            "whole": payload(whole),
            "links": payload(links),
            "private": private,
            "escape": escape,
            "out_of_range": out_of_range,
            "filtered": payload(tagged),
        }

    got = call(daemon, steps)
    # `vaultd mcp --help` lists what the server lists, from the same declarations.
    helped = subprocess.run(
        [sys.executable, "-m", "vaultd", "mcp", "--help"],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=True,
    ).stdout
    section = helped.split("\nTools:\n", 1)[1].split("\n\n", 1)[0]
    listed = [
        line.split()[0]
        for line in section.splitlines()
        if line.startswith("  ") and not line.startswith("   ")
    ]
    assert listed == list(got["tools"])
    assert set(got["tools"]) == {
        "search",
        "read_note",
        "links",
        "related",
        "unlinked_mentions",
        "outline",
        "tags",
        "recent_notes",
        "backlinks",
    }
    schema = got["tools"]["search"].input_schema
    assert {"query", "k", "mode", "tags", "path_prefix"} <= set(schema["properties"])
    assert schema["required"] == ["query"]

    hit = got["hit"]
    assert hit["path"] == "Animals/Otter.md" and "hold hands" in hit["text"]
    # A hit's line range read back from the vault file is the passage the hit quoted.
    lines = got["lines"]
    assert (lines["start_line"], lines["end_line"]) == (hit["start_line"], hit["end_line"])
    assert lines["text"] == hit["text"] and lines["total_lines"] == 9
    assert got["whole"]["text"] == NOTES["Animals/Otter.md"].rstrip("\n")
    assert got["whole"]["total_lines"] == NOTES["Animals/Otter.md"].count("\n")
    assert got["out_of_range"].is_error and "has 9 lines" in got["out_of_range"].content[0].text
    assert got["links"]["backlinks"] == ["Animals/Otter.md"]
    # Excluded notes stay out of the assistant's reach, and so does anything outside the vault.
    assert got["private"].is_error and "no indexed note" in got["private"].content[0].text
    assert got["escape"].is_error
    assert got["filtered"]["hits"] == []


def test_backlinks_and_every_filter_of_the_api_search(daemon: RunningDaemon) -> None:
    async def steps(session: ClientSession) -> Any:
        found = payload(await session.call_tool("backlinks", {"path": "Kelp forest"}))
        none = payload(await session.call_tool("backlinks", {"path": "Garden.md"}))
        base = {"query": "otter", "mode": "keyword"}
        filtered = [
            payload(await session.call_tool("search", {**base, **extra}))["hits"]
            for extra in (
                {},
                {"where": {"tags": "garden/veg"}},
                {"tags_any": ["garden", "nothing"]},
                {"since": "2100-01-01"},
                {"path_prefix": "Animals/"},
            )
        ]
        return found, none, filtered

    found, none, (every, where, tags_any, future, folder) = call(daemon, steps)
    assert found["path"] == "Kelp forest.md"
    [otter] = found["backlinks"]
    assert (otter["path"], otter["title"], otter["links"]) == ("Animals/Otter.md", "Otter", 1)
    [passage] = otter["passages"]
    assert passage["link_lines"] == [9] and "See [[Kelp forest]]." in passage["text"]
    assert none == {"path": "Garden.md", "backlinks": []}
    # Each filter the API's search takes, the tool takes, and it narrows the hits.
    assert {h["path"] for h in every} == {"Animals/Otter.md", "Garden.md"}
    assert {h["path"] for h in where} == {"Garden.md"}
    assert {h["path"] for h in tags_any} == {"Garden.md"}
    assert future == []
    assert {h["path"] for h in folder} == {"Animals/Otter.md"}


def test_links_lists_outgoing_links(daemon: RunningDaemon) -> None:
    async def steps(session: ClientSession) -> Any:
        return payload(await session.call_tool("links", {"path": "Animals/Otter.md"}))

    got = call(daemon, steps)
    assert [link["target"] for link in got["links"]] == ["Kelp forest"]
    assert got["title"] == "Otter"


def test_related_names_the_nearest_notes_and_the_passages_that_tie_them(
    daemon: RunningDaemon,
) -> None:
    async def steps(session: ClientSession) -> Any:
        near = payload(await session.call_tool("related", {"path": "Kelp forest.md", "k": 2}))
        unlinked = payload(
            await session.call_tool(
                "related", {"path": "Kelp forest.md", "k": 2, "exclude_linked": True}
            )
        )
        missing = await session.call_tool("related", {"path": "Nowhere.md"})
        private = await session.call_tool("related", {"path": "Private/Diary.md"})
        return near, unlinked, missing, private

    near, unlinked, missing, private = call(daemon, steps)
    first = near["related"][0]
    # The otter note links the kelp forest; the garden is about something else.
    assert first["path"] == "Animals/Otter.md" and first["linked"] is True
    assert {"start_line", "end_line", "text"} <= set(first["target"])
    assert first["source"]["text"].startswith("Underwater forests")
    assert [r["path"] for r in unlinked["related"]] == ["Garden.md"]
    assert missing.is_error and "no indexed note" in missing.content[0].text
    assert private.is_error  # excluded notes have no neighbours, nor are they any


def test_the_tools_take_a_note_by_its_name_as_obsidian_does(daemon: RunningDaemon) -> None:
    async def steps(session: ClientSession) -> Any:
        return [
            await session.call_tool(name, {"path": path})
            for name, path in (
                ("read_note", "otter"),
                ("links", "Kelp forest"),
                ("related", "kelp forest.md"),
                ("outline", "Animals/Otter"),
                ("unlinked_mentions", "Otter"),
                ("read_note", "Diary"),  # out of the index: no name reaches it
            )
        ]

    *found, private = call(daemon, steps)
    assert [payload(r)["path"] for r in found] == [
        "Animals/Otter.md",
        "Kelp forest.md",
        "Kelp forest.md",
        "Animals/Otter.md",
        "Animals/Otter.md",
    ]
    assert payload(found[0])["text"].startswith("# Otter")
    assert payload(found[1])["backlinks"] == ["Animals/Otter.md"]
    assert private.is_error and "no indexed note 'Diary'" in private.content[0].text


def test_mentions_outline_tags_recent_notes_and_snippets(daemon: RunningDaemon) -> None:
    async def steps(session: ClientSession) -> Any:
        names = ("unlinked_mentions", "outline", "tags", "recent_notes", "search")
        args: list[dict[str, Any]] = [
            {"path": "Animals/Otter.md"},
            {"path": "Animals/Otter.md"},
            {},
            {"k": 10},
            {"query": "otters hold hands", "k": 1, "snippets": True},
        ]
        answers = [payload(await session.call_tool(n, a)) for n, a in zip(names, args, strict=True)]
        private = await session.call_tool("outline", {"path": "Private/Diary.md"})
        return *answers, private

    mentions, outline, tags, recent, found, private = call(daemon, steps)
    # The garden names the otter without a link; the kelp forest is linked from it, and the
    # diary is out of the index.
    assert [(m["path"], m["text"]) for m in mentions["mentions"]] == [
        ("Garden.md", "An **otter** came up from the pond at dusk.")
    ]
    assert [(h["text"], h["start_line"], h["end_line"]) for h in outline["headings"]] == [
        ("Otter", 1, 9),
        ("Diet", 5, 9),
    ]
    assert tags["tags"] == [{"tag": "garden", "notes": 1}, {"tag": "garden/veg", "notes": 1}]
    assert {n["path"] for n in recent["notes"]} == {
        "Animals/Otter.md",
        "Kelp forest.md",
        "Garden.md",
    }
    hit = found["hits"][0]
    assert "text" not in hit and "**" not in hit["snippet"]
    assert [hit["snippet"][s:e] for s, e in hit["highlights"]] == ["Otters", "hold", "hands"]
    assert private.is_error


#: What an MCP client passes its servers (the SDK's default environment and more): nothing of
#: the test's own, so the bridge finds its daemon from the config alone.
CLIENT_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")


class RawBridge:
    """`vaultd mcp` driven line by line, for what the SDK's client never sends."""

    def __init__(self, config: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "vaultd", "mcp", "--config", str(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={k: os.environ[k] for k in CLIENT_ENV if k in os.environ},
        )
        assert self.process.stdout is not None
        self.lines = selectors.DefaultSelector()
        self.lines.register(self.process.stdout, selectors.EVENT_READ)

    def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def receive(self, patience: float = PATIENCE) -> Any:
        """The next message the bridge writes, or AssertionError when none comes in time."""
        assert self.process.stdout is not None
        if not self.lines.select(patience):
            self.process.kill()
            assert self.process.stderr is not None
            raise AssertionError(
                f"the bridge wrote nothing in {patience} s: {self.process.stderr.read()[-3000:]!r}"
            )
        line = self.process.stdout.readline()
        assert line, self.process.stderr.read() if self.process.stderr else "closed"
        return json.loads(line)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(PATIENCE)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self.lines.close()
            for stream in (self.process.stdout, self.process.stderr):
                if stream is not None:
                    stream.close()


HELLO = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "script", "version": "0"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def test_a_line_that_is_no_json_rpc_message_gets_a_json_rpc_error(daemon: RunningDaemon) -> None:
    bridge = RawBridge(daemon.config)
    try:
        bridge.send(json.dumps(HELLO).encode())
        assert bridge.receive()["id"] == 1
        bridge.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        # Not JSON at all, cut short, and JSON that is no JSON-RPC message: each is answered,
        # with id null (the spec's rule when the id cannot be read).
        for line, code in (
            (b"this is not json", -32700),
            (b'{"jsonrpc": "2.0", "id": 2, "method": "tools/li', -32700),
            (b'{"hello": "world"}', -32600),
        ):
            bridge.send(line)
            answer = bridge.receive()
            assert answer["jsonrpc"] == "2.0" and answer["id"] is None, answer
            assert answer["error"]["code"] == code, (line, answer)
        # And the session goes on.
        bridge.send(b'{"jsonrpc": "2.0", "id": 3, "method": "tools/list"}')
        tools = bridge.receive()
        assert tools["id"] == 3 and any(t["name"] == "search" for t in tools["result"]["tools"])
    finally:
        bridge.close()


def test_an_oversized_query_is_refused_for_its_size_not_blamed_on_the_daemon(
    daemon: RunningDaemon,
) -> None:
    huge = "otter " * (10 * 1024 * 1024 // 6)  # 10 MB, as the probe sent

    async def steps(session: ClientSession) -> Any:
        refused = await session.call_tool("search", {"query": huge})
        tagged = await session.call_tool(
            "search", {"query": "otter", "tags": ["t" * 1000] * 2000}
        )  # a body of 2 MB with a short query
        after = await session.call_tool("search", {"query": "otters hold hands", "k": 1})
        return refused, tagged, after

    refused, tagged, after = call(daemon, steps)
    for result in (refused, tagged):
        assert result.is_error
        text = result.content[0].text
        assert "not running" not in text, text
    assert f"at most {MAX_QUERY_CHARS}" in refused.content[0].text, refused.content[0].text
    assert f"at most {MAX_BODY} bytes" in tagged.content[0].text, tagged.content[0].text
    assert payload(after)["hits"][0]["path"] == "Animals/Otter.md"
    assert daemon.process.poll() is None


# -- stdin closed: what was asked is answered first ----------------------------------------------


#: The fault: a search for this never finishes, and the wait after stdin closes is shorter:
#: still long enough for the other calls, which open the index, on a loaded machine (they
#: take about 0.6 s on an idle one).
NEVER_ANSWERED = """
import threading
import vaultd.cli.mcp_bridge as bridge
import vaultd.cli.mcp_stdio as stdio

stdio.DRAIN = 10.0
_run = bridge.Bridge.run

def run(self, tool, given):
    if given.get("query") == "never answered":
        threading.Event().wait()
    return _run(self, tool, given)

bridge.Bridge.run = run
"""


@pytest.fixture(scope="module")
def no_daemon(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The config of an indexed vault no daemon serves: each call opens the index itself."""
    root = tmp_path_factory.mktemp("drain")
    config = write_vault(root, NOTES)
    with config.open("a", encoding="utf-8") as f:
        f.write(f'[server]\nsocket = "{short_socket_dir()}/none.sock"\n')
    subprocess.run([VAULTD, "index", "-q", "--config", str(config)], check=True, timeout=PATIENCE)
    return config


def scripted(
    config: Path, calls: list[dict[str, Any]], env: Mapping[str, str] = {}
) -> tuple[subprocess.CompletedProcess[str], dict[Any, Any], float]:
    """`printf '%s\\n' "$init" "$initialized" CALLS... | vaultd mcp`, as a script runs it with an
    MCP client's environment: the process, its answers by id, and how long it took."""
    lines = [HELLO, INITIALIZED, *({"jsonrpc": "2.0", **c} for c in calls)]
    started = time.monotonic()
    done = subprocess.run(
        [VAULTD, "mcp", "--config", str(config)],
        input="".join(json.dumps(line) + "\n" for line in lines) if calls else "",
        capture_output=True,
        text=True,
        env={**{k: os.environ[k] for k in CLIENT_ENV if k in os.environ}, **env},
        timeout=PATIENCE,
    )
    answers = {a["id"]: a for a in map(json.loads, done.stdout.splitlines())}
    return done, answers, time.monotonic() - started


def tool_call(id: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def test_every_call_written_before_stdin_closes_is_answered_before_the_bridge_exits(
    no_daemon: Path,
) -> None:
    done, answers, _ = scripted(
        no_daemon,
        [
            tool_call(2, "search", {"query": "why do otters hold hands", "k": 1}),
            tool_call(3, "read_note", {"path": "Otter"}),
            tool_call(4, "tags", {}),
        ],
    )
    assert done.returncode == 0, done.stderr
    assert set(answers) == {1, 2, 3, 4}, done.stdout
    results = {i: answers[i]["result"] for i in (2, 3, 4)}
    assert not any(r["isError"] for r in results.values()), results
    assert results[2]["structuredContent"]["hits"][0]["path"] == "Animals/Otter.md"
    assert results[3]["structuredContent"]["text"].startswith("# Otter")
    assert {"tag": "garden/veg", "notes": 1} in results[4]["structuredContent"]["tags"]


def test_stdin_closed_with_nothing_asked_ends_the_bridge_at_once(no_daemon: Path) -> None:
    done, answers, took = scripted(no_daemon, [])
    assert done.returncode == 0, done.stderr
    assert answers == {} and took < DRAIN / 2, (answers, took)


def test_a_call_that_never_finishes_is_given_up_after_the_wait_and_said_so(
    no_daemon: Path, tmp_path: Path
) -> None:
    done, answers, took = scripted(
        no_daemon,
        [tool_call(2, "search", {"query": "never answered"}), tool_call(3, "tags", {})],
        fault_env(tmp_path, NEVER_ANSWERED),
    )
    assert done.returncode == EXIT_FAILURE, done.stderr
    assert not answers[3]["result"]["isError"], answers[3]
    # The one given up is answered with an error, and stderr says which and why.
    assert "error" in answers[2], answers[2]
    given_up = [line for line in done.stderr.splitlines() if "gave up" in line]
    assert given_up == [
        "vaultd mcp: gave up on request 2 (tools/call search): no answer 10 s after stdin closed"
    ], done.stderr
    assert took < PATIENCE


#: The fault: a search for this never finishes, and says on a file when it has begun.
NEVER_ANSWERED_BEGUN = """
import threading
from pathlib import Path
import vaultd.cli.mcp_bridge as bridge

_run = bridge.Bridge.run

def run(self, tool, given):
    if given.get("query") == "never answered":
        Path({begun!r}).touch()
        threading.Event().wait()
    return _run(self, tool, given)

bridge.Bridge.run = run
"""


def test_a_call_the_client_cancelled_does_not_hold_the_bridge_open_once_stdin_closes(
    no_daemon: Path, tmp_path: Path
) -> None:
    """A cancelled call is left to its thread, which cannot be interrupted; the interpreter
    waited for that thread at exit, so the bridge never exited after stdin closed."""
    begun = tmp_path / "begun"
    env = fault_env(tmp_path, NEVER_ANSWERED_BEGUN.format(begun=str(begun)))
    with subprocess.Popen(
        [VAULTD, "mcp", "--config", str(no_daemon)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**{k: os.environ[k] for k in CLIENT_ENV if k in os.environ}, **env},
    ) as process:
        try:
            assert process.stdin is not None
            call = {"jsonrpc": "2.0", **tool_call(2, "search", {"query": "never answered"})}
            for line in (HELLO, INITIALIZED, call):
                process.stdin.write(json.dumps(line) + "\n")
            process.stdin.flush()
            wait_until(begun.exists, "the call runs in its thread")
            cancel = {"requestId": 2, "reason": "the user gave up"}
            cancelled = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}
            process.stdin.write(json.dumps(cancelled) + "\n")
            process.stdin.close()
            process.wait(timeout=PATIENCE)
        finally:
            process.kill()
        assert process.stdout is not None and process.stderr is not None
        out, err = process.stdout.read(), process.stderr.read()
    # Nothing asked is left unanswered: the client cancelled the one call it did not want.
    assert process.returncode == 0, err
    assert [json.loads(line)["id"] for line in out.splitlines()] == [1], out
