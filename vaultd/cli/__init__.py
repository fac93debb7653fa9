"""The front ends: the `vaultd` command (`commands`), `doctor`, the service files
(`vaultd service`) and the MCP bridge (`vaultd mcp`).

The top layer: may import anything below it; nothing imports it but `vaultd.__main__`.
"""
