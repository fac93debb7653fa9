"""`vaultd mcp` started as an MCP client starts it: the SDK's `stdio_client`, by default with its
minimal environment (HOME, LOGNAME, PATH, SHELL, TERM, USER)."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

from harness.daemon import PATIENCE

#: The `vaultd` command the install put beside this Python, as a client's settings name it.
VAULTD = str(Path(sys.executable).parent / "vaultd")


def session(
    args: list[str],
    steps: Callable[[ClientSession, Any], Awaitable[Any]],
    env: dict[str, str] | None = None,
) -> Any:
    """Start `vaultd ARGS` as an MCP client does (env None: the SDK's default environment),
    initialize, and run `steps(session, initialize's result)`."""
    params = StdioServerParameters(command=VAULTD, args=args, env=env)

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
