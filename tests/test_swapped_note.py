"""A symlink swapped in for an indexed note, or for its folder, never yields outside bytes.

`rm V/Home.md; ln -s /etc/passwd V/Home.md` after Home.md was indexed: for the debounce window
the index still lists Home.md. Every endpoint and MCP tool that reads a note's bytes must read
the file the walk would reach by that name, never the link's target. The test races the swap
against readers for several seconds, through the socket and through a real MCP client.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from harness.daemon import RunningDaemon, running
from vaultd.errors import DaemonError

pytestmark = pytest.mark.slow

MARKER = "OUTSIDE-THE-VAULT-7f3a"
HOME = "# Home\n\nThe start page of the vault.\n"
INNER = "# Inner\n\nA note in a folder.\n"
RACE_SECONDS = 4.0


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningDaemon, Path, Path]]:
    tmp_path = tmp_path_factory.mktemp("swapped")
    vault = tmp_path / "vault"
    (vault / "Folder").mkdir(parents=True)
    (vault / "Home.md").write_text(HOME, encoding="utf-8")
    (vault / "Folder" / "Inner.md").write_text(INNER, encoding="utf-8")
    outside = tmp_path / "outside"
    (outside / "Folder").mkdir(parents=True)
    (outside / "secret.md").write_text(f"# Secret\n\n{MARKER}\n", encoding="utf-8")
    (outside / "Folder" / "Inner.md").write_text(f"# Inner\n\n{MARKER}\n", encoding="utf-8")
    # A long debounce: the index keeps listing the swapped notes while the race runs.
    with running(vault, tmp_path, debounce="2s") as d:
        yield d, vault, outside


def _swapper(vault: Path, outside: Path, stop: threading.Event) -> None:
    home, folder = vault / "Home.md", vault / "Folder"
    parked = vault.parent / "Folder.parked"
    while not stop.is_set():
        home.unlink()
        home.symlink_to(outside / "secret.md")
        folder.rename(parked)
        folder.symlink_to(outside / "Folder", target_is_directory=True)
        time.sleep(0.01)
        home.unlink()
        home.write_text(HOME, encoding="utf-8")
        folder.unlink()
        parked.rename(folder)
        time.sleep(0.01)


@contextlib.contextmanager
def swapping(vault: Path, outside: Path) -> Iterator[None]:
    stop = threading.Event()
    thread = threading.Thread(target=_swapper, args=(vault, outside, stop), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)


def _answers_through_the_socket(daemon: RunningDaemon, deadline: float) -> tuple[int, list[str]]:
    served, bodies = 0, []
    while time.monotonic() < deadline:
        for path in ("Home.md", "Folder/Inner.md"):
            for query in ("?text=1", "?text=1&start_line=1&end_line=3", ""):
                try:
                    answer = daemon.request("GET", f"/v1/notes/{quote(path)}{query}")
                except DaemonError as exc:
                    assert exc.status == 404, exc
                    continue
                served += 1
                bodies.append(json.dumps(answer))
        hits = daemon.search(MARKER, mode="keyword")
        bodies.append(json.dumps(hits))
    return served, bodies


def test_no_endpoint_reads_through_a_swapped_symlink(
    daemon: tuple[RunningDaemon, Path, Path],
) -> None:
    running_daemon, vault, outside = daemon
    with swapping(vault, outside):
        served, bodies = _answers_through_the_socket(
            running_daemon, time.monotonic() + RACE_SECONDS
        )
    assert served > 20  # the race really read notes, between the swaps
    assert not [b for b in bodies if MARKER in b]
    # Once the swaps stop with the real files in place, the notes read as before.
    running_daemon.search("home", wait_for="Home.md", timeout=60)
    note = running_daemon.request("GET", "/v1/notes/Home.md?text=1")
    assert note["text"] == HOME.rstrip("\n")


def test_no_mcp_tool_reads_through_a_swapped_symlink(
    daemon: tuple[RunningDaemon, Path, Path],
) -> None:
    running_daemon, vault, outside = daemon
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "vaultd", "mcp", "--config", str(running_daemon.config)],
        env={**os.environ},
    )
    texts: list[str] = []
    served = 0

    async def main() -> None:
        nonlocal served
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            deadline = time.monotonic() + RACE_SECONDS
            while time.monotonic() < deadline:
                for path in ("Home.md", "Folder/Inner.md"):
                    for tool, args in (
                        ("read_note", {"path": path}),
                        ("read_note", {"path": path, "start_line": 1, "end_line": 3}),
                        ("links", {"path": path}),
                        ("search", {"query": MARKER, "mode": "keyword"}),
                    ):
                        result: Any = await session.call_tool(tool, args)
                        texts.extend(getattr(c, "text", "") for c in result.content)
                        served += not result.is_error

    with swapping(vault, outside):
        anyio.run(main)
    assert served > 20
    assert not [t for t in texts if MARKER in t]
