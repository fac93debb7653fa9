"""The shape of the code: no class in vaultd/ over 400 lines, no function over 80, and a test
file of its own for every module of the indexing core.

A class that long owns more than one thing, and a function that long does; both are read from
the source with `ast`. No module is exempt: a long algorithm (a graph rewrite, a quantizer)
reads as a few named steps.

The tests of storage/, pipeline/ and index/ mirror them: `vaultd/<package>/<module>.py` is
tested in `tests/<package>/test_<module>.py` (a module of a subpackage,
`pipeline/discover/walk.py`, in `tests/pipeline/test_discover_walk.py`), so a change to one
module has one place to look. Tests of behaviour across modules (the daemon, reliability, the
CLI) stay at the top of tests/.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "vaultd"
TESTS = Path(__file__).resolve().parent

MAX_CLASS = 400
MAX_FUNCTION = 80
MIRRORED = ("storage", "pipeline", "index")


def too_long(root: Path = PACKAGE) -> dict[str, int]:
    """Every class over MAX_CLASS lines and function over MAX_FUNCTION, by `file:name`."""
    found: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root).as_posix()
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


def untested(root: Path = PACKAGE, tests: Path = TESTS) -> list[str]:
    """Every module of the MIRRORED packages without its own test file, by the file wanted."""
    missing = []
    for package in MIRRORED:
        for path in sorted((root / package).rglob("*.py")):
            if path.name == "__init__.py":
                continue
            module = "_".join(path.relative_to(root / package).with_suffix("").parts)
            wanted = tests / package / f"test_{module}.py"
            if not wanted.is_file():
                missing.append(wanted.relative_to(tests.parent).as_posix())
    return missing


def test_every_module_of_the_indexing_core_has_a_test_file_of_its_own() -> None:
    missing = untested()
    assert not missing, "no test file for these modules:\n" + "\n".join(missing)


def test_the_check_names_the_test_file_a_module_lacks(tmp_path: Path) -> None:
    for package in MIRRORED:
        (tmp_path / "vaultd" / package / "deep").mkdir(parents=True)
        (tmp_path / "tests" / package).mkdir(parents=True)
    (tmp_path / "vaultd" / "index" / "deep" / "__init__.py").touch()
    (tmp_path / "vaultd" / "index" / "deep" / "walk.py").touch()
    (tmp_path / "vaultd" / "storage" / "lock.py").touch()
    (tmp_path / "tests" / "storage" / "test_lock.py").touch()
    assert untested(tmp_path / "vaultd", tmp_path / "tests") == ["tests/index/test_deep_walk.py"]
