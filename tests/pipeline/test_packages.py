"""pipeline/packages: the package rule, on each kind of manifest and on the real projects of
the shared code corpus (a Cargo virtual workspace, npm monorepos, pyproject, go.mod)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import captured_logs, shared_path
from vaultd.pipeline.packages import MANIFESTS, PackageFinder, is_manifest, package_name


def disk_reader(root: Path, reads: list[str] | None = None) -> PackageFinder:
    """A finder reading the folder `root` as a vault (each path read is added to `reads`)."""

    def read(path: str) -> bytes | None:
        if reads is not None:
            reads.append(path)
        file = root / path
        return file.read_bytes() if file.is_file() else None

    return PackageFinder(read)


@pytest.mark.parametrize(
    ("file_name", "text", "name"),
    [
        ("Cargo.toml", '[package]\nname = "serde"\nversion = "1.0.0"\n', "serde"),
        ("Cargo.toml", '[workspace]\nmembers = ["a", "b"]\n', None),
        ("package.json", '{"name": "@scope/pkg", "version": "1.0.0"}', "@scope/pkg"),
        ("package.json", '{"private": true, "workspaces": ["packages/*"]}', None),
        ("package.json", '["not", "an", "object"]', None),
        ("pyproject.toml", '[project]\nname = "click"\n', "click"),
        ("pyproject.toml", '[tool.poetry]\nname = "poems"\n', "poems"),
        ("pyproject.toml", "[tool.ruff]\nline-length = 100\n", None),
        ("go.mod", "module github.com/spf13/cobra\n\ngo 1.15\n", "github.com/spf13/cobra"),
        ("go.mod", '// a comment\nmodule "example.com/quoted" // why\n', "example.com/quoted"),
    ],
)
def test_each_manifest_names_its_package_or_none(
    file_name: str, text: str, name: str | None
) -> None:
    assert package_name(file_name, text.encode()) == name


@pytest.mark.parametrize(
    ("file_name", "data"),
    [
        ("Cargo.toml", b"[package\nname = "),
        ("Cargo.toml", b'package = "a string, not a table"\n'),
        ("package.json", b'{"name": "cut off'),
        ("pyproject.toml", b"\xff\xfe not UTF-8"),
        ("go.mod", b"go 1.21\n"),
    ],
)
def test_a_manifest_that_does_not_parse_raises_value_error(file_name: str, data: bytes) -> None:
    with pytest.raises((ValueError, AttributeError)):
        package_name(file_name, data)


def test_only_the_four_manifest_names_are_manifests() -> None:
    assert set(MANIFESTS) == {"Cargo.toml", "package.json", "pyproject.toml", "go.mod"}
    assert is_manifest("a/b/Cargo.toml") and is_manifest("package.json")
    assert not is_manifest("a/Cargo.lock") and not is_manifest("a/cargo.toml/x.rs")


def source_files(root: Path) -> list[str]:
    """Every file under `root` that is no manifest, as vault paths."""
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and not is_manifest(p.name)
    )


def test_a_crate_in_a_cargo_workspace_gets_the_crates_name_never_the_workspaces() -> None:
    tokio = shared_path("corpora", "code", "tokio")
    assert "[package]" not in (tokio / "Cargo.toml").read_text()  # a virtual workspace
    finder = disk_reader(tokio.parent)
    found = finder.of_many(f"tokio/{p}" for p in source_files(tokio))
    by_crate = {
        crate: {found[p] for p in found if p.startswith(f"tokio/{crate}/")}
        for crate in ("tokio-stream", "tokio-macros")
    }
    assert by_crate == {"tokio-stream": {"tokio-stream"}, "tokio-macros": {"tokio-macros"}}
    # The workspace root's own files (its licence) are in no package: the root names none.
    assert found["tokio/LICENSE"] is None


@pytest.mark.parametrize(
    ("project", "expected"),
    [
        # An npm monorepo: each package its own name, the private root's for what is outside.
        (
            "changesets",
            {
                "packages/assemble-release-plan/": "@changesets/assemble-release-plan",
                "packages/config/": "@changesets/config",
                "": "@changesets/repository",
            },
        ),
        # A root package.json and a differently named one below it.
        (
            "openzeppelin-contracts",
            {"contracts/": "@openzeppelin/contracts", "": "openzeppelin-solidity"},
        ),
        (
            "openzeppelin-compact-contracts",
            {"contracts/": "@openzeppelin/compact-contracts", "": "openzeppelin-compact"},
        ),
        (
            "midnight-example-counter",
            {
                "contract/": "@midnight-ntwrk/counter-contract",
                "counter-cli/": "@midnight-ntwrk/counter-cli",
                "": "example-counter",
            },
        ),
        ("click", {"": "click"}),
        ("cobra", {"": "github.com/spf13/cobra"}),
        ("chibi-scheme", {"": None}),
    ],
)
def test_every_file_of_a_project_gets_its_nearest_named_package(
    project: str, expected: dict[str, str | None]
) -> None:
    """The rule, checked on every file: its package is the one of the longest folder prefix
    listed for it (as SOURCE.md of the corpus lists the project's manifests)."""
    root = shared_path("corpora", "code", project)
    finder = disk_reader(root.parent)
    files = source_files(root)
    assert files
    for path in files:
        prefix = max((p for p in expected if path.startswith(p)), key=len)
        assert finder.of(f"{project}/{path}") == expected[prefix], path


def test_two_npm_packages_of_one_monorepo_each_get_their_own_name() -> None:
    root = shared_path("corpora", "code", "changesets")
    finder = disk_reader(root.parent)
    names = {
        finder.of(f"changesets/packages/{package}/src/index.ts")
        for package in ("assemble-release-plan", "config")
    }
    assert names == {"@changesets/assemble-release-plan", "@changesets/config"}


def test_each_manifest_is_read_once_a_pass_and_again_after_forget(tmp_path: Path) -> None:
    (tmp_path / "crate" / "src" / "deep").mkdir(parents=True)
    (tmp_path / "crate" / "Cargo.toml").write_text('[package]\nname = "crate"\n')
    reads: list[str] = []
    finder = disk_reader(tmp_path, reads)
    files = [f"crate/src/{n}.rs" for n in "abc"] + ["crate/src/deep/d.rs", "crate/e.rs"]
    assert set(finder.of_many(files).values()) == {"crate"}
    assert reads.count("crate/Cargo.toml") == 1
    assert reads.count("crate/src/Cargo.toml") == 1  # each folder looked in once
    finder.forget()
    (tmp_path / "crate" / "Cargo.toml").write_text('[package]\nname = "renamed"\n')
    assert finder.of("crate/src/a.rs") == "renamed"
    assert reads.count("crate/Cargo.toml") == 2


def test_a_broken_manifest_is_passed_over_and_said_once(tmp_path: Path) -> None:
    (tmp_path / "app" / "lib").mkdir(parents=True)
    (tmp_path / "package.json").write_text('{"name": "outer"}')
    (tmp_path / "app" / "package.json").write_text('{"name": ')
    (tmp_path / "app" / "lib" / "package.json").write_text('{"version": "1.0.0"}')
    finder = disk_reader(tmp_path)
    with captured_logs() as logs:
        assert finder.of("app/lib/x.js") == "outer"
        finder.forget()
        assert finder.of("app/lib/y.js") == "outer"
    said = [e for e in logs if e["event"].startswith("a package manifest does not parse")]
    assert [e["path"] for e in said] == ["app/package.json"]


def test_in_one_folder_the_first_manifest_that_names_a_package_decides(tmp_path: Path) -> None:
    (tmp_path / "Cargo.toml").write_text("[workspace]\n")
    (tmp_path / "package.json").write_text('{"name": "napi-binding"}')
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "also-python"\n')
    assert disk_reader(tmp_path).of("src/lib.rs") == "napi-binding"
