"""`vaultd mcp` started as an MCP client starts it: the SDK's `stdio_client`, by default with its
minimal environment (HOME, LOGNAME, PATH, SHELL, TERM, USER), and PYTHONPATH naming this
checkout, so that the server runs the code under test, not whichever the install points to."""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

from harness.daemon import PATIENCE

#: The `vaultd` command the install put beside this Python, as a client's settings name it.
VAULTD = str(Path(sys.executable).parent / "vaultd")
#: The checkout these tests are in.
ROOT = Path(__file__).resolve().parents[1]


def session(
    args: list[str],
    steps: Callable[[ClientSession, Any], Awaitable[Any]],
    env: dict[str, str] | None = None,
) -> Any:
    """Start `vaultd ARGS` as an MCP client does (env None: the SDK's default environment; the
    SDK adds it to any env given), initialize, and run `steps(session, initialize's result)`."""
    given = env or {}
    path = os.pathsep.join(p for p in (str(ROOT), given.get("PYTHONPATH")) if p)
    params = StdioServerParameters(command=VAULTD, args=args, env={**given, "PYTHONPATH": path})

    async def main() -> Any:
        with anyio.fail_after(PATIENCE):
            async with (
                stdio_client(params) as (read, write),
                ClientSession(read, write) as client,
            ):
                hello = await client.initialize()
                return await steps(client, hello)

    return anyio.run(main)


def error_text(result: Any) -> str:
    assert result.is_error, result
    return str(result.content[0].text)
