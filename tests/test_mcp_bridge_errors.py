"""`vaultd mcp` explains itself: with no vault configured, with no daemon (and no index yet),
and with a daemon that stops mid-session, the MCP client gets an answer it shows (a tool
result with isError and what to do), never a closed connection.

Each test starts the installed `vaultd` executable as an MCP client does: the SDK's
`stdio_client` with its default minimal environment (HOME, LOGNAME, PATH, SHELL, TERM, USER).
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession

from harness.daemon import PATIENCE, running, short_socket_dir
from tests.mcp_session import VAULTD, error_text, session
from tests.small_vault import write_vault

pytestmark = pytest.mark.slow

NOTES = {
    "Animals/Otter.md": "# Otter\n\nOtters hold hands while they sleep so they do not drift "
    "apart.\n",
    "Garden.md": "# Garden\n\nTomatoes want the south wall.\n",
}


def test_with_no_vault_configured_every_tool_says_how_to_set_one_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A home with no config in it: what a new user has right after installing.
    monkeypatch.setenv("HOME", str(tmp_path))

    async def steps(client: ClientSession, hello: Any) -> Any:
        tools = await client.list_tools()
        search = await client.call_tool("search", {"query": "otters"})
        read = await client.call_tool("read_note", {"path": "Otter"})
        return hello, tools, search, read

    hello, tools, search, read = session(["mcp"], steps)
    assert len(tools.tools) == 9
    assert "not set up" in hello.instructions and "vaultd init" in hello.instructions
    for result in (search, read):
        text = error_text(result)
        assert "no vault to serve" in text, text
        assert "vaultd init ~/Notes" in text and '"--vault"' in text, text


def test_a_config_that_does_not_load_is_named_with_its_problem(tmp_path: Path) -> None:
    config = tmp_path / "vaultd.toml"
    config.write_text("[vault]\npath = 42\n", encoding="utf-8")

    async def steps(client: ClientSession, hello: Any) -> Any:
        return await client.call_tool("tags", {})

    text = error_text(session(["mcp", "--config", str(config)], steps))
    assert "configuration cannot be used" in text and "[vault] path" in text, text
    assert "vaultd init" in text, text


def test_without_a_daemon_the_tools_answer_from_the_index_or_say_to_index(
    tmp_path: Path,
) -> None:
    config = write_vault(tmp_path, NOTES)
    sockets = short_socket_dir()  # no daemon will ever answer here
    with config.open("a", encoding="utf-8") as f:
        f.write(f'[server]\nsocket = "{sockets}/none.sock"\n')

    async def steps(client: ClientSession, hello: Any) -> Any:
        never_indexed = await client.call_tool("search", {"query": "otters"})
        # Indexed meanwhile by hand: the next call reads the index as now written.
        done = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                [VAULTD, "index", "-q", "--config", str(config)],
                capture_output=True,
                timeout=PATIENCE,
            )
        )
        assert done.returncode == 0, done.stderr
        found = await client.call_tool("search", {"query": "why do otters hold hands", "k": 1})
        read = await client.call_tool("read_note", {"path": "otter"})
        return hello, never_indexed, found, read

    hello, never_indexed, found, read = session(["mcp", "--config", str(config)], steps)
    assert "no vaultd daemon is running" in hello.instructions.lower()
    assert "index as last written" in hello.instructions
    text = error_text(never_indexed)
    # The commands suggested carry the bridge's own --config (vaultd.hints).
    assert "never indexed" in text and f"`vaultd index --config {config}`" in text, text
    assert f"`vaultd run --config {config}`" in text, text
    assert not found.is_error and found.structured_content["hits"][0]["path"] == (
        "Animals/Otter.md"
    )
    assert not read.is_error and read.structured_content["path"] == "Animals/Otter.md"
    assert read.structured_content["text"].startswith("# Otter")


def test_a_daemon_stopped_mid_session_leaves_the_index_answering(tmp_path: Path) -> None:
    config = write_vault(tmp_path, NOTES)
    vault = tmp_path / "vault"
    with running(vault, tmp_path) as daemon:

        async def steps(client: ClientSession, hello: Any) -> Any:
            asked = {"query": "otters hold hands", "k": 1}
            waiting = {**asked, "wait_for": "Animals/Otter.md", "timeout": 30}
            before = await client.call_tool("search", asked)
            waited = await client.call_tool("search", waiting)
            assert daemon.stop(signal.SIGTERM) == 0
            after = await client.call_tool("search", asked)
            unwaited = await client.call_tool("search", waiting)
            outline = await client.call_tool("outline", {"path": "Otter"})
            return hello, (before, waited, after, unwaited), outline

        hello, searches, outline = session(["mcp", "--config", str(daemon.config)], steps)
    assert config.exists()
    assert "no vaultd daemon is running" not in hello.instructions.lower()
    for result in searches:
        assert not result.is_error, result.content
        assert result.structured_content["hits"][0]["path"] == "Animals/Otter.md"
    # The daemon waited; the index alone cannot (nothing indexes without a daemon), and says so.
    before, waited, after, unwaited = (r.structured_content for r in searches)
    assert "not_waited" not in before and "not_waited" not in waited, waited
    assert "not_waited" not in after, after
    assert unwaited == {**after, "not_waited": "no_daemon"}
    assert not outline.is_error, outline.content
    assert outline.structured_content["path"] == "Animals/Otter.md"
