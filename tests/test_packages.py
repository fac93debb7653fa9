"""Package membership for real (issue 55): a real daemon over copies of the shared code corpus's
tokio (a Cargo virtual workspace of two crates) and changesets (an npm monorepo of two
packages). Each crate and package is named on its hits (never the workspace's or the
monorepo root's name), the `package` filter works through the socket, the CLI and MCP, and a
manifest saved under a new name re-attributes its files within the debounce window with
nothing embedded, whether or not the manifests are themselves indexed.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from harness.daemon import PATIENCE, RunningDaemon, running, wait_until
from tests.conftest import shared_path
from tests.page_server import CHROMIUM, chromium, enter, ui_server
from vaultd.api.client import Client
from vaultd.cli.commands import main
from vaultd.cli.common import DaemonOrIndex
from vaultd.cli.mcp_bridge import TOOLS, Bridge
from vaultd.layout import vault_id

pytestmark = pytest.mark.corpus

#: The files indexed of the two projects (each copied whole, manifests and all), by package:
#: a few small ones of each crate and package, so that embedding them takes seconds.
INDEXED = {
    "tokio-stream": ["tokio/tokio-stream/src/pending.rs", "tokio/tokio-stream/src/once.rs"],
    "tokio-macros": ["tokio/tokio-macros/src/select.rs"],
    "@changesets/config": [
        "changesets/packages/config/src/defaults.ts",
        "changesets/packages/config/src/utils.ts",
    ],
    "@changesets/assemble-release-plan": [
        "changesets/packages/assemble-release-plan/src/increment.ts",
        "changesets/packages/assemble-release-plan/src/flatten-releases.ts",
    ],
}
DEBOUNCE = "200ms"
PLAN = "@changesets/assemble-release-plan"


def embedded(daemon: RunningDaemon) -> int:
    return int(daemon.request("GET", "/v1/status")["embedded_total"])


def note(daemon: RunningDaemon, path: str) -> dict[str, Any]:
    answer: dict[str, Any] = daemon.request("GET", f"/v1/notes/{path}")
    return answer


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    root = tmp_path_factory.mktemp("packages")
    vault = root / "vault"
    for project in ("tokio", "changesets"):
        shutil.copytree(shared_path("corpora", "code", project), vault / project)
    globs = json.dumps([p for paths in INDEXED.values() for p in paths])
    with running(vault, root, debounce=DEBOUNCE, extra=f"[attachments]\ncode = {globs}\n") as d:
        yield d


def test_each_crate_and_npm_package_is_named_never_its_workspace(
    daemon: RunningDaemon,
) -> None:
    # The roots name none (tokio's is a virtual workspace) or another name (changesets' is
    # the private `@changesets/repository`): no file is theirs.
    for package, paths in INDEXED.items():
        for path in paths:
            assert note(daemon, path)["package"] == package, path
            hits = daemon.search("the", path_prefix=path, k=1)
            assert hits and hits[0]["package"] == package, path


def test_the_package_filter_through_the_socket(daemon: RunningDaemon) -> None:
    for package, paths in INDEXED.items():
        hits = daemon.search("stream release config select", k=20, packages=[package])
        assert hits and {h["path"] for h in hits} <= set(paths), package
        assert {h["package"] for h in hits} == {package}
        # The same written in the query: not a word searched for, but the same filter.
        written = daemon.search(f"stream release config select package:{package}", k=20)
        assert [h["id"] for h in written] == [h["id"] for h in hits]
    both = daemon.search("stream package:tokio-stream package:tokio-macros", k=20)
    assert {h["package"] for h in both} == {"tokio-stream", "tokio-macros"}
    assert daemon.search("stream", k=20, packages=["tokio"]) == []  # the workspace is none
    upper = daemon.search("config", k=20, packages=["@Changesets/Config"])
    assert {h["package"] for h in upper} == {"@changesets/config"}


def test_the_cli_and_mcp_filter_by_package_and_show_it(daemon: RunningDaemon) -> None:
    config = str(daemon.config)
    ran = CliRunner().invoke(
        main,
        ["search", "release", "--package", PLAN, "-k", "5", "--config", config],
    )
    assert ran.exit_code == 0, ran.output
    places = [line for line in ran.stdout.splitlines() if line[:1].isdigit()]
    assert places and all(
        "changesets/packages/assemble-release-plan/" in line and f"· package {PLAN}" in line
        for line in places
    ), ran.stdout
    ran = CliRunner().invoke(
        main, ["search", "stream package:tokio-stream", "--json", "--config", config]
    )
    assert ran.exit_code == 0, ran.output
    assert {h["package"] for h in json.loads(ran.stdout)["hits"]} == {"tokio-stream"}

    bridge = Bridge(DaemonOrIndex(lambda: Client(daemon.socket, timeout=30), None, "start it"))
    search = next(tool for tool in TOOLS if tool.name == "search")
    assert "packages" in search.schema()["properties"]
    found = bridge.run(search, {"query": "select", "packages": ["tokio-macros"]})["hits"]
    assert found and {h["package"] for h in found} == {"tokio-macros"}
    found = bridge.run(search, {"query": "config package:@changesets/config"})["hits"]
    assert found and {h["package"] for h in found} == {"@changesets/config"}


@pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is absent")
def test_the_pages_package_filter_and_hit_line(daemon: RunningDaemon, tmp_path: Path) -> None:
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    vault = Path(daemon.request("GET", "/v1/health")["vault"])
    client = Client(daemon.socket, timeout=90, vault_id=vault_id(vault))
    with ui_server(client, vault) as ui, chromium() as browser:
        page = enter(browser.new_context(), ui, tmp_path)
        page.goto(page.url.split("#")[0] + "#search")
        page.get_by_label("Package").fill("tokio-macros")
        page.fill("#q", "select")
        page.wait_for_function(
            "() => document.body.dataset.lastQuery === 'select'"
            " && document.querySelectorAll('#hits li[id]').length",
            timeout=PATIENCE * 1000,
        )
        lines = page.locator("#hits li[id] .section").all_inner_texts()
        assert lines and all(
            line.startswith("tokio/tokio-macros/") and line.endswith("› package tokio-macros")
            for line in lines
        ), lines


def test_a_crate_renamed_in_its_manifest_is_re_attributed_with_nothing_embedded(
    daemon: RunningDaemon,
) -> None:
    """Cargo.toml is no source file here (`code` names only .rs and .ts files): the watcher
    passes its change on all the same."""
    daemon.wait_idle()
    before = embedded(daemon)
    manifest = Path(daemon.request("GET", "/v1/health")["vault"]) / "tokio/tokio-stream/Cargo.toml"
    text = manifest.read_text(encoding="utf-8")
    assert 'name = "tokio-stream"' in text
    saved = time.monotonic()
    manifest.write_text(text.replace('name = "tokio-stream"', 'name = "tokio-brook"'))
    renamed = INDEXED["tokio-stream"]

    def attributed() -> bool:
        return {note(daemon, p).get("package") for p in renamed} == {"tokio-brook"}

    wait_until(attributed, "the crate's files are in the renamed package")
    took = time.monotonic() - saved
    hits = daemon.search("stream", k=20, packages=["tokio-brook"])
    assert hits and {h["path"] for h in hits} <= set(renamed)
    assert daemon.search("stream", k=20, packages=["tokio-stream"]) == []
    daemon.wait_idle()
    assert embedded(daemon) == before
    # The other crate's files were not touched.
    assert note(daemon, INDEXED["tokio-macros"][0])["package"] == "tokio-macros"
    print(f"re-attributed {took:.2f} s after the save (debounce {DEBOUNCE})")

    manifest.write_text(text)
    wait_until(lambda: note(daemon, renamed[0]).get("package") == "tokio-stream", "renamed back")
    daemon.wait_idle()
    assert embedded(daemon) == before


def test_an_indexed_manifest_re_attributes_too_and_only_it_is_embedded(tmp_path: Path) -> None:
    """With `code = ["**/*"]` the manifests are source files too: a changed one is embedded
    again (its own text changed), its package's other files are not."""
    vault = tmp_path / "vault"
    tokio = shared_path("corpora", "code", "tokio")
    for part in ("Cargo.toml", "tokio-macros/Cargo.toml", "tokio-macros/src/select.rs"):
        (vault / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(tokio / part, vault / part)
    extra = '[attachments]\ncode = ["**/*"]\n'
    with running(vault, tmp_path, debounce=DEBOUNCE, extra=extra) as daemon:
        daemon.wait_idle()
        source = "tokio-macros/src/select.rs"
        assert note(daemon, source)["package"] == "tokio-macros"
        assert note(daemon, "tokio-macros/Cargo.toml")["package"] == "tokio-macros"
        assert "package" not in note(daemon, "Cargo.toml")  # the workspace root: in none
        before = embedded(daemon)
        manifest = vault / "tokio-macros" / "Cargo.toml"
        manifest.write_text(manifest.read_text().replace('"tokio-macros"', '"tokio-spells"', 1))
        wait_until(lambda: note(daemon, source).get("package") == "tokio-spells", "renamed")
        daemon.wait_idle()
        chunks = len(note(daemon, "tokio-macros/Cargo.toml")["chunks"])
        assert 0 < embedded(daemon) - before <= chunks
        # Deleted: the crate's files go up to the workspace root, which names none.
        manifest.unlink()
        wait_until(lambda: "package" not in note(daemon, source), "in no package")
