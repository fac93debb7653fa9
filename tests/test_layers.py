"""The import contract: vaultd's packages are layers, and each imports only downward.

Read from the source with `ast`, every import counts, including those inside functions and
under TYPE_CHECKING: an import deferred to save start-up time is still a dependency.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "vaultd"

#: Bottom to top. A module may import its own layer and the layers below, never above; the
#: packages of one layer never import one another.
LAYERS: list[set[str]] = [
    {
        "vaultd",
        "vaultd.errors",
        "vaultd.records",
        "vaultd.answers",
        "vaultd.config",
        "vaultd.layout",
        "vaultd.vaultpath",
        "vaultd.faults",
        "vaultd.progress",
        "vaultd.logs",
        "vaultd.trust",
    },
    {"vaultd.embedding", "vaultd.pipeline", "vaultd.storage"},
    {"vaultd.index"},
    {"vaultd.api"},
    {"vaultd.daemon", "vaultd.ui", "vaultd.doctor"},
    {"vaultd.cli"},
    {"vaultd.__main__"},
]
#: Packages whose modules are independent stages: none imports a sibling. A stage may be a
#: package of its own (`vaultd.pipeline.discover`), whose modules import one another.
STAGES = {"vaultd.pipeline"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p): p for p in sorted(root.rglob("*.py"))}


def imports_of(path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """The vaultd modules `path` imports (a name imported from a package counts as its module
    when it is one), with the line of each import."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "vaultd":
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "vaultd":
                continue
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                yield (full if full in known else node.module), node.lineno


def unit_of(module: str) -> str:
    """The layer entry a module belongs to: its package, or itself at the top level."""
    for unit in sorted(set().union(*LAYERS), key=len, reverse=True):
        if module == unit or module.startswith(unit + "."):
            return unit
    raise AssertionError(f"{module} is in no layer: add it to LAYERS in {__file__}")


def layer_of(module: str) -> int:
    unit = unit_of(module)
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def stage_of(module: str, package: str) -> str:
    """The stage of `package` a module is, or is part of."""
    return ".".join(module.split(".")[: package.count(".") + 2])


def broken_rule(module: str, target: str) -> str | None:
    """The rule `module` breaks by importing `target`, or None."""
    mine, theirs = unit_of(module), unit_of(target)
    if layer_of(target) > layer_of(module):
        return "a layer above it"
    if layer_of(target) == layer_of(module) > 0 and mine != theirs:
        return "a package of the same layer"
    if (
        mine in STAGES
        and theirs == mine
        and mine not in (module, target)
        and stage_of(module, mine) != stage_of(target, mine)
    ):
        return "and stages never import each other"
    return None


def violations(found: dict[str, Path]) -> list[str]:
    known = set(found)
    problems = []
    for module, path in found.items():
        for target, line in imports_of(path, known):
            rule = broken_rule(module, target)
            if rule is not None:
                problems.append(f"{path.name}:{line}: {module} imports {target}, {rule}")
    return problems


def cycles(found: dict[str, Path]) -> list[list[str]]:
    known = set(found)
    graph = {
        m: sorted({t for t, _ in imports_of(p, known) if t in known and t != m})
        for m, p in found.items()
    }
    cycles_found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                cycles_found.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node)
    return cycles_found


def test_every_module_is_in_a_layer() -> None:
    for module in modules():
        unit_of(module)


def test_layers_import_only_downward() -> None:
    problems = violations(modules())
    assert not problems, "\n".join(problems)


def test_no_import_cycles() -> None:
    found = cycles(modules())
    assert not found, "\n".join(" -> ".join(c) for c in found)


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("vaultd/records.py", "from vaultd.index.search import Searcher\n", "a layer above"),
        ("vaultd/api/server.py", "from vaultd.daemon.lifecycle import Daemon\n", "a layer above"),
        ("vaultd/storage/probe.py", "from vaultd.pipeline import parse\n", "same layer"),
        ("vaultd/pipeline/chunk.py", "from vaultd.pipeline.parse import decode\n", "stages never"),
        (
            "vaultd/pipeline/discover/walk.py",
            "from vaultd.pipeline.parse import decode\n",
            "stages never",
        ),
    ],
)
def test_the_contract_catches_a_violation(
    tmp_path: Path, module: str, source: str, expected: str
) -> None:
    """Each rule fails on a deliberate violation added to a copy of one module."""
    found = modules()
    name = module_name(PACKAGE.parent / module)
    copy = tmp_path / Path(module).name
    copy.write_text(found[name].read_text(encoding="utf-8") + source, encoding="utf-8")
    problems = violations({**found, name: copy})
    assert any(expected in p for p in problems), problems


def test_the_contract_catches_a_cycle(tmp_path: Path) -> None:
    found = modules()
    copy = tmp_path / "layout.py"
    copy.write_text(
        found["vaultd.layout"].read_text() + "from vaultd.vaultpath import vault_path\n"
    )
    vaultpath = tmp_path / "vaultpath.py"
    vaultpath.write_text(
        found["vaultd.vaultpath"].read_text() + "from vaultd.layout import vault_id\n"
    )
    found["vaultd.layout"], found["vaultd.vaultpath"] = copy, vaultpath
    assert any({"vaultd.layout", "vaultd.vaultpath"} <= set(c) for c in cycles(found))
