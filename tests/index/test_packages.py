"""index/packages on a real index (the real model, Chroma and manifest): each source file's
package named as it is written, shown on its hits, filtered by (`packages`, `package:NAME`),
re-attributed when a manifest changes with nothing embedded, and read only as the vault's rules
and safe reading allow. The daemon's side (the watcher, the socket, the CLI and MCP) is
tests/test_packages.py's."""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from vaultd.answers import Hit
from vaultd.config import load_config
from vaultd.errors import QueryError
from vaultd.index.open import Index, open_index
from vaultd.index.packages import watch_rule
from vaultd.pipeline.discover import Discovery, IgnoreRules
from vaultd.query import Filters, SearchQuery, check_query

FILES = {
    # A Cargo virtual workspace: the crates are named, the root is not.
    "Cargo.toml": '[workspace]\nmembers = ["crates/*"]\n',
    "crates/alpha/Cargo.toml": '[package]\nname = "alpha"\nversion = "0.1.0"\n',
    "crates/alpha/src/lib.rs": "/// Folds the lanterns into one beam.\npub fn fold_lanterns() {}\n",
    "crates/beta/Cargo.toml": '[package]\nname = "beta"\nversion = "0.1.0"\n',
    "crates/beta/src/lib.rs": "/// Splits the lanterns in two.\npub fn split_lanterns() {}\n",
    "web/package.json": '{"name": "@demo/web", "version": "1.0.0"}',
    "web/src/index.ts": "// Folds the lanterns on the page.\nexport function lanterns() {}\n",
    "loose.rs": "/// A package of lanterns with no crate.\npub fn loose_lanterns() {}\n",
    "Notes.md": "# Notes\n\nLanterns fold in the package of alpha.\n",
}


def make_vault(root: Path) -> Path:
    vault = root / "vault"
    for name, text in FILES.items():
        (vault / name).parent.mkdir(parents=True, exist_ok=True)
        (vault / name).write_text(text, encoding="utf-8")
    return vault


def open_code_index(root: Path, vault: Path, code: str = '["**/*.rs", "**/*.ts"]') -> Index:
    config = root / "c.toml"
    config.write_text(
        f'[vault]\npath = "{vault}"\n[store]\npath = "{root / "data"}"\n[log]\nlevel = "error"\n'
        f"[attachments]\ncode = {code}\n",
        encoding="utf-8",
    )
    return open_index(load_config(config, env={}), env={})


@pytest.fixture
def index(tmp_path: Path) -> Iterator[Index]:
    with open_code_index(tmp_path, make_vault(tmp_path)) as opened:
        opened.indexer.reconcile()
        yield opened


def packages(index: Index) -> dict[str, str | None]:
    return index.manifest.notes.code_packages()


def test_each_source_file_is_in_its_nearest_named_package(index: Index) -> None:
    assert packages(index) == {
        "crates/alpha/src/lib.rs": "alpha",
        "crates/beta/src/lib.rs": "beta",
        "web/src/index.ts": "@demo/web",
        "loose.rs": None,
    }
    hits = index.searcher.search(SearchQuery("fold lanterns", k=10)).hits
    by_path = {h.path: h.package for h in hits}
    assert by_path["crates/alpha/src/lib.rs"] == "alpha"
    assert by_path["Notes.md"] is None and by_path["loose.rs"] is None
    assert TypeAdapter(Hit).dump_python(hits[0], mode="json").get("package") == hits[0].package


def test_package_in_the_query_filters_and_is_no_word(index: Index) -> None:
    hits = index.searcher.search(SearchQuery("lanterns package:beta", k=10)).hits
    assert [h.path for h in hits] == ["crates/beta/src/lib.rs"]
    # In any case; several are any of them.
    hits = index.searcher.search(SearchQuery("lanterns package:ALPHA package:@demo/web", k=10)).hits
    assert {h.path for h in hits} == {"crates/alpha/src/lib.rs", "web/src/index.ts"}
    # Neither "package" nor "alpha" is a word searched for, and the rest is searched as
    # typed without it.
    parsed = check_query('lanterns package:alpha "one beam"')
    assert parsed.words == ("lanterns", "one", "beam") and parsed.filters.packages == ("alpha",)
    assert parsed.phrases == ("one beam",)
    hits = index.searcher.search(SearchQuery("package:alpha lanterns", k=10, mode="keyword")).hits
    assert [h.path for h in hits] == ["crates/alpha/src/lib.rs"]
    assert hits[0].highlights and "package" not in {
        hits[0].text[a:b].lower() for a, b in hits[0].highlights
    }
    # Inside quotes it is words of a phrase, not a filter.
    assert check_query('"package:alpha"').filters.packages == ()


def test_the_packages_filter_and_a_query_term_must_both_pass(index: Index) -> None:
    asked = Filters.of({"packages": ["alpha", "beta"]})
    hits = index.searcher.search(SearchQuery("lanterns", k=10, filters=asked)).hits
    assert {h.path for h in hits} == {"crates/alpha/src/lib.rs", "crates/beta/src/lib.rs"}
    hits = index.searcher.search(SearchQuery("lanterns package:beta", k=10, filters=asked)).hits
    assert [h.path for h in hits] == ["crates/beta/src/lib.rs"]
    result = index.searcher.search(SearchQuery("lanterns package:@demo/web", k=10, filters=asked))
    assert result.hits == () and result.short == "exhausted"
    with pytest.raises(QueryError, match="package"):
        index.searcher.search(SearchQuery("package:alpha", k=10))


def test_a_renamed_crate_is_re_attributed_with_nothing_embedded(index: Index) -> None:
    manifest = index.indexer.root / "crates" / "alpha" / "Cargo.toml"
    manifest.write_text('[package]\nname = "alpha-renamed"\nversion = "0.1.0"\n')
    embedded = index.indexer.vectors_made
    summary = index.indexer.reconcile_paths(["crates/alpha/Cargo.toml"])
    assert summary.chunks_embedded == 0 and index.indexer.vectors_made == embedded
    assert packages(index)["crates/alpha/src/lib.rs"] == "alpha-renamed"
    assert packages(index)["crates/beta/src/lib.rs"] == "beta"
    hits = index.searcher.search(SearchQuery("lanterns package:alpha-renamed", k=10)).hits
    assert [(h.path, h.package) for h in hits] == [("crates/alpha/src/lib.rs", "alpha-renamed")]

    # Deleted: its files go up to the next manifest naming a package (the workspace root
    # names none), so they are in none.
    manifest.unlink()
    index.indexer.reconcile_paths(["crates/alpha/Cargo.toml"])
    assert packages(index)["crates/alpha/src/lib.rs"] is None


def test_a_full_pass_names_again_what_changed_while_nothing_watched(index: Index) -> None:
    (index.indexer.root / "web" / "package.json").write_text('{"name": "@demo/site"}')
    (index.indexer.root / "package.json").write_text('{"name": "outer"}')
    summary = index.indexer.reconcile()
    assert summary.chunks_embedded == 0 and summary.notes_changed == 0
    assert packages(index)["web/src/index.ts"] == "@demo/site"
    # The workspace's Cargo.toml beside it names none: the package.json does.
    assert packages(index)["loose.rs"] == "outer"
    assert packages(index)["crates/alpha/src/lib.rs"] == "alpha"
    (index.indexer.root / "package.json").unlink()
    index.indexer.reconcile()
    assert packages(index)["loose.rs"] is None


def test_a_manifest_linked_out_of_the_vault_is_not_read(tmp_path: Path) -> None:
    vault = make_vault(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "package.json").write_text('{"name": "from-outside"}')
    (vault / "web" / "package.json").unlink()
    os.symlink(outside / "package.json", vault / "web" / "package.json")
    (vault / "package.json").write_text('{"name": "vault-root"}')
    with open_code_index(tmp_path, vault) as index:
        index.indexer.reconcile()
        assert packages(index)["web/src/index.ts"] == "vault-root"


def test_a_manifest_the_rules_leave_out_is_not_read(tmp_path: Path) -> None:
    vault = make_vault(tmp_path)
    (vault / ".gitignore").write_text("crates/beta/Cargo.toml\n")
    with open_code_index(tmp_path, vault) as index:
        index.indexer.reconcile()
        assert packages(index)["crates/beta/src/lib.rs"] is None
        assert packages(index)["crates/alpha/src/lib.rs"] == "alpha"


def test_the_watcher_passes_on_manifests_only_where_source_files_are_indexed(
    tmp_path: Path,
) -> None:
    from vaultd.config import AttachmentsSection, VaultSection

    vault = make_vault(tmp_path)
    (vault / ".gitignore").write_text("crates/beta/\n")
    section = VaultSection(path=vault)
    code = Discovery(vault, IgnoreRules.from_config(section, AttachmentsSection(code=("**/*.rs",))))
    ignored = watch_rule(code)
    assert not ignored("crates/alpha/Cargo.toml", False)  # no source file, but a manifest
    assert not ignored("web/package.json", False) and not ignored("go.mod", False)
    assert not ignored("crates/alpha/src/lib.rs", False)
    assert ignored("crates/alpha/Cargo.lock", False)
    assert ignored("crates/beta/Cargo.toml", False)  # the rules leave its folder out
    assert ignored(".git/package.json", False)
    notes_only = Discovery(vault, IgnoreRules.from_config(section, AttachmentsSection()))
    assert watch_rule(notes_only)("crates/alpha/Cargo.toml", False)


def test_a_manifest_in_a_folder_named_in_nfd_on_disk_is_read(tmp_path: Path) -> None:
    """Paths are NFC; a folder synced from macOS may be named NFD on disk."""
    vault = make_vault(tmp_path)
    folder = vault / unicodedata.normalize("NFD", "Café")
    (folder / "src").mkdir(parents=True)
    (folder / "Cargo.toml").write_text('[package]\nname = "cafe"\n')
    (folder / "src" / "lib.rs").write_text("/// Brews the lanterns.\npub fn brew() {}\n")
    with open_code_index(tmp_path, vault) as index:
        index.indexer.reconcile()
        assert packages(index)[unicodedata.normalize("NFC", "Café/src/lib.rs")] == "cafe"
