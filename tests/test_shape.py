"""The shape of the code: no class in vaultd/ over 400 lines, no function over 80, no class of
storage/ or index/ that is mostly forwards to other objects, and a test file of its own for
every module of the indexing core.

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


#: Methods a class of storage/ or index/ may have that only pass a call on to another object.
MAX_FORWARDS = 10
FORWARDING = ("storage", "index")


def _passed_on(node: ast.expr, names: set[str]) -> bool:
    """Whether an argument is only handed on: a parameter, a constant, or `self.x`."""
    if isinstance(node, ast.Starred):
        node = node.value
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.Constant):
        return True
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def forwards(method: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a method only forwards: its body (a docstring aside) is one call, returned or
    not, of another object's method (`self.x.f(...)`) or a module's function (`m.f(...)`),
    with nothing but its own parameters, constants and `self.x` as arguments."""
    body = method.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if len(body) != 1 or not isinstance(body[0], ast.Return | ast.Expr):
        return False
    call = body[0].value
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
        return False
    target = call.func.value
    to_other = isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
    to_module = isinstance(target, ast.Name) and target.id != "self"
    if not (to_other or to_module):
        return False
    arguments = method.args
    names = {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}
    names |= {a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None}
    values = [*call.args, *(k.value for k in call.keywords)]
    return all(_passed_on(value, names) for value in values)


def forwarders(root: Path = PACKAGE, packages: tuple[str, ...] = FORWARDING) -> dict[str, int]:
    """Every class of `packages` with more than MAX_FORWARDS forwarding methods, by
    `file:class`, with how many it has."""
    found: dict[str, int] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not isinstance(node, ast.ClassDef):
                    continue
                methods = [
                    n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                ]
                count = sum(1 for m in methods if forwards(m))
                if count > MAX_FORWARDS:
                    found[f"{path.relative_to(root).as_posix()}:{node.name}"] = count
    return found


def test_no_class_of_storage_or_index_is_a_facade_of_forwards() -> None:
    over = forwarders()
    assert not over, "\n".join(
        f"{name}: {count} forwarding methods" for name, count in over.items()
    )


def test_the_walk_counts_forwarding_methods(tmp_path: Path) -> None:
    (tmp_path / "index").mkdir()
    forwarding = "".join(
        f"    def f{i}(self, path):\n        return notes.f{i}(self._query, path)\n"
        for i in range(MAX_FORWARDS + 1)
    )
    working = "    def g(self, path):\n        return notes.g(self._query, path.strip())\n"
    (tmp_path / "index" / "m.py").write_text(f"class Facade:\n{forwarding}{working}")
    assert forwarders(tmp_path, ("index",)) == {"index/m.py:Facade": MAX_FORWARDS + 1}


#: The indexer's phases, by module, and the components a pass is made of: a class holding
#: BAG of them as fields is a bag of all, which no phase's constructor may take.
PHASES = {
    "index/detection.py": "Detection",
    "index/prepare.py": "Preparer",
    "index/keyword_phase.py": "KeywordPhase",
    "index/embedding_phase.py": "EmbeddingPhase",
}
COMPONENTS = {
    "Discovery",
    "Manifest",
    "VectorStore",
    "TextEmbedder",
    "Embedder",
    "Writer",
    "Faults",
    "Outcomes",
    "Pauses",
    "Reader",
    "StoreSync",
}
BAG = 3


def bags(root: Path = PACKAGE) -> set[str]:
    """The classes of vaultd/ with at least BAG components among their annotated fields."""
    found = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                held = {
                    ast.unparse(item.annotation).strip("'\"")
                    for item in node.body
                    if isinstance(item, ast.AnnAssign)
                }
                if len(held & COMPONENTS) >= BAG:
                    found.add(node.name)
    return found


def phases_taking_bags(root: Path = PACKAGE) -> dict[str, list[str]]:
    """Each phase whose constructor takes a bag of components, with the bags it takes."""
    known = bags(root)
    found: dict[str, list[str]] = {}
    for module, name in PHASES.items():
        path = root / module
        if not path.exists():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ClassDef) and node.name == name):
                continue
            for init in node.body:
                if isinstance(init, ast.FunctionDef) and init.name == "__init__":
                    arguments = [*init.args.args, *init.args.kwonlyargs]
                    taken = [
                        ast.unparse(a.annotation).strip("'\"")
                        for a in arguments
                        if a.annotation is not None
                    ]
                    if hit := [t for t in taken if t in known]:
                        found[f"{module}:{name}"] = hit
    return found


def test_no_phase_is_made_from_a_bag_of_all_the_components() -> None:
    assert not phases_taking_bags()


def test_the_walk_finds_a_phase_made_from_a_bag(tmp_path: Path) -> None:
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "passes.py").write_text(
        "class Parts:\n    discovery: Discovery\n    manifest: Manifest\n"
        "    store: VectorStore\n    writer: Writer\n"
    )
    (tmp_path / "index" / "keyword_phase.py").write_text(
        "class KeywordPhase:\n    def __init__(self, parts: Parts, sync: StoreSync) -> None:\n"
        "        self.parts = parts\n"
    )
    assert phases_taking_bags(tmp_path) == {"index/keyword_phase.py:KeywordPhase": ["Parts"]}
