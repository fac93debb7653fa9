"""The docs keep up with the code: every module and package is described in
docs/architecture.md, every command in the README's table, and the constants the README
states are the code's."""

from __future__ import annotations

from pathlib import Path

import click

from vaultd.cli.commands import main
from vaultd.cli.mcp_stdio import DRAIN

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "vaultd"


def test_every_module_and_package_is_in_the_architecture_doc() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if path.name == "__init__.py":
            if rel.parent != Path() and f"`{rel.parent.as_posix()}/`" not in text:
                missing.append(f"{rel.parent.as_posix()}/")
        elif path.name != "__main__.py" and f"`{rel.as_posix()}`" not in text:
            missing.append(rel.as_posix())
    assert not missing, f"describe these in docs/architecture.md: {missing}"


def commands(group: click.Group, prefix: str = "vaultd") -> list[str]:
    found = []
    for name, command in sorted(group.commands.items()):
        if command.hidden:
            continue
        found.append(f"{prefix} {name}")
        if isinstance(command, click.Group):
            found += commands(command, f"{prefix} {name}")
    return found


def test_every_command_is_in_the_readme() -> None:
    table = [line for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()]
    rows = [line for line in table if line.startswith("| `vaultd ")]
    missing = []
    for command in commands(main):
        *group, name = command.split()
        if not any(
            f"`{' '.join(group)} {name}" in row
            or (len(group) > 1 and f"`{' '.join(group)} " in row and name in row)
            for row in rows
        ):
            missing.append(command)
    assert not missing, f"add these to the README's command table: {missing}"


def test_the_readme_states_the_mcp_drain_the_code_waits() -> None:
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert f"One still unanswered {DRAIN:g} s after stdin closed is given up" in readme
