"""Package membership: the package a source file belongs to, named by the nearest manifest
above it.

The rule (also in docs/search.md, "Packages"):
- Walking up from the file's folder to the vault root, the first folder holding a manifest
  that names a package decides. The manifests, in the order they are tried in one folder:
  `Cargo.toml` (`[package] name`), `package.json` (`"name"`), `pyproject.toml`
  (`[project] name`, else `[tool.poetry] name`), `go.mod` (its `module`).
- A manifest that names no package is passed over and the walk goes on up: a Cargo workspace
  root without `[package]`, a `package.json` without a name, a `pyproject.toml` holding only
  tool settings. So a crate inside a workspace gets the crate's name, never the workspace's.
- A manifest that does not parse (bad TOML or JSON, a `go.mod` with no `module`) is passed
  over too, and said in the log once.
- A file with no such manifest above it has no package (None).

The stage reads nothing itself: the caller hands it the way to read a vault path (the
daemon's own safe reading, which never follows a link out of the vault). What each folder
decides is kept until `forget`, so a pass reads each manifest once however many files share
it.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Iterable
from pathlib import PurePosixPath
from typing import Any

import structlog

log = structlog.get_logger(__name__)

#: A vault path's bytes, or None when there is no such file (or it cannot be read).
Read = Callable[[str], bytes | None]


def _cargo(data: bytes) -> Any:
    return (tomllib.loads(data.decode("utf-8")).get("package") or {}).get("name")


def _npm(data: bytes) -> Any:
    found = json.loads(data.decode("utf-8"))
    return found.get("name") if isinstance(found, dict) else None


def _python(data: bytes) -> Any:
    found = tomllib.loads(data.decode("utf-8"))
    project = found.get("project") or {}
    poetry = (found.get("tool") or {}).get("poetry") or {}
    return project.get("name") or poetry.get("name")


# `module example.com/m`, the path perhaps quoted; `//` starts a comment.
_GO_MODULE = re.compile(r'^\s*module\s+["`]?([^\s"`]+)["`]?\s*(?://.*)?$', re.MULTILINE)


def _go(data: bytes) -> Any:
    found = _GO_MODULE.search(data.decode("utf-8"))
    if found is None:
        raise ValueError("no module directive")
    return found[1]


#: The manifests, in the order they are tried in one folder, with what reads each one's name.
MANIFESTS: dict[str, Callable[[bytes], Any]] = {
    "Cargo.toml": _cargo,
    "package.json": _npm,
    "pyproject.toml": _python,
    "go.mod": _go,
}


def is_manifest(path: str) -> bool:
    """Whether a vault path names a package manifest (a file whose change may move files from
    one package to another)."""
    return PurePosixPath(path).name in MANIFESTS


def package_name(file_name: str, data: bytes) -> str | None:
    """The package a manifest names, or None when it names none (a workspace root).

    Raises ValueError when it does not parse (bad UTF-8, TOML or JSON; no `module`)."""
    found = MANIFESTS[file_name](data)
    if isinstance(found, str) and found.strip():
        return found.strip()
    return None


def folder_of(path: str) -> str:
    """The folder a vault path is in ("" for the vault root)."""
    parent = PurePosixPath(path).parent.as_posix()
    return "" if parent == "." else parent


def _joined(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


class PackageFinder:
    """Finds each file's package by the rule above, reading through `read`."""

    def __init__(self, read: Read) -> None:
        self._read = read
        #: Folder -> the package of the files in it (None: none), as decided since `forget`.
        self._decided: dict[str, str | None] = {}
        #: Manifests said in the log not to parse, with the problem: said again only when
        #: the problem changes.
        self._said: dict[str, str] = {}

    def forget(self) -> None:
        """Read the manifests again from now on (a new pass)."""
        self._decided.clear()

    def of(self, path: str) -> str | None:
        """The package of the file at vault path `path`."""
        return self.of_folder(folder_of(path))

    def of_folder(self, folder: str) -> str | None:
        """The package of the files in `folder` ("" for the vault root)."""
        walked: list[str] = []
        here: str | None = folder
        found: str | None = None
        while here is not None:
            if here in self._decided:
                found = self._decided[here]
                break
            walked.append(here)
            found = self._named_in(here)
            if found is not None:
                break
            here = None if here == "" else folder_of(here)
        for seen in walked:
            self._decided[seen] = found
        return found

    def of_many(self, paths: Iterable[str]) -> dict[str, str | None]:
        return {path: self.of(path) for path in paths}

    def _named_in(self, folder: str) -> str | None:
        """The package a manifest in `folder` itself names, or None."""
        for file_name in MANIFESTS:
            path = _joined(folder, file_name)
            data = self._read(path)
            if data is None:
                continue
            try:
                name = package_name(file_name, data)
            except (ValueError, AttributeError) as exc:
                # AttributeError: a table where TOML allows any value (`package = 1`).
                self._say(path, str(exc) or type(exc).__name__)
                continue
            self._said.pop(path, None)
            if name is not None:
                return name
        return None

    def _say(self, path: str, problem: str) -> None:
        if self._said.get(path) == problem:
            return
        self._said[path] = problem
        log.warning("a package manifest does not parse; passed over", path=path, problem=problem)
