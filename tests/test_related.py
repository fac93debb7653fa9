"""Related notes through the socket API and the CLI, and freshness on a running daemon (the
ranking itself: tests/index/test_related.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner

from harness.daemon import running
from tests.index.test_related import NOTES
from tests.small_vault import api, indexed
from vaultd.cli.commands import main
from vaultd.errors import ApiError, QueryError
from vaultd.index.open import Index


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    with indexed(tmp_path_factory.mktemp("related"), NOTES) as opened:
        yield opened


def test_the_socket_route_and_its_checks(index: Index) -> None:
    status, body = api(index, f"/v1/notes/{quote('Sea/Otters.md')}/related?k=2&exclude_linked=1")
    assert status == HTTPStatus.OK and body["path"] == "Sea/Otters.md"
    assert len(body["related"]) == 2 and "Sea/Kelp.md" not in [r["path"] for r in body["related"]]
    assert set(body["related"][0]) == {
        "path",
        "title",
        "score",
        "similarity",
        "linked",
        "source",
        "target",
    }
    status, body = api(index, "/v1/notes/Sea/Kelp.md/related?tag=animals&how=passages")
    assert [r["path"] for r in body["related"]] == ["Sea/Otters.md", "Sea/Whales.md"]
    for target, code in (
        ("/v1/notes/Nowhere.md/related", HTTPStatus.NOT_FOUND),
        ("/v1/notes/Sea/Kelp.md/related?k=0", HTTPStatus.BAD_REQUEST),
        ("/v1/notes/Sea/Kelp.md/related?how=telepathy", HTTPStatus.BAD_REQUEST),
        ("/v1/notes/Sea/Kelp.md/related?start_line=30&end_line=40", HTTPStatus.BAD_REQUEST),
        ("/v1/notes/..%2Fescape.md/related", HTTPStatus.BAD_REQUEST),
    ):
        with pytest.raises(ApiError) as raised:
            api(index, target)
        assert raised.value.status == code, target
    # The note itself is still served at its own route.
    assert api(index, "/v1/notes/Sea/Kelp.md")[1]["title"] == "Kelp"


def test_the_cli_without_a_daemon(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    for path in ("Home/Bread.md", "Home/Pizza.md", "Sea/Otters.md", "Sea/Kelp.md"):
        (vault / path).parent.mkdir(parents=True, exist_ok=True)
        (vault / path).write_text(NOTES[path], encoding="utf-8")
    toml = tmp_path / "c.toml"
    toml.write_text(
        f'[vault]\npath = "{vault}"\n[store]\npath = "{tmp_path / "data"}"\n'
        '[log]\nlevel = "error"\n',
        encoding="utf-8",
    )
    runner = CliRunner()
    assert runner.invoke(main, ["index", "-q", "--config", str(toml)]).exit_code == 0
    out = runner.invoke(
        main, ["related", "Home/Bread.md", "-k", "1", "--json", "--config", str(toml)]
    )
    assert out.exit_code == 0, out.output
    assert [r["path"] for r in json.loads(out.output)["related"]] == ["Home/Pizza.md"]
    # The note's file path works too; linked notes are marked.
    text = runner.invoke(main, ["related", str(vault / "Sea/Otters.md"), "--config", str(toml)])
    assert text.exit_code == 0, text.output
    assert "1. Sea/Kelp.md" in text.output and "[linked]" in text.output
    bad = runner.invoke(main, ["related", "Home/Bread.md", "--lines", "9-2", "--config", str(toml)])
    assert bad.exit_code == QueryError.exit_code and "A-B" in bad.output
    missing = runner.invoke(main, ["related", "Nowhere.md", "--config", str(toml)])
    assert missing.exit_code == QueryError.exit_code and "not an indexed note" in missing.output


@pytest.mark.slow
def test_a_saved_note_is_related_by_its_new_text_as_soon_as_it_is_searchable(
    tmp_path: Path,
) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    for path, text in NOTES.items():
        (vault / path).parent.mkdir(parents=True, exist_ok=True)
        (vault / path).write_text(text, encoding="utf-8")
    with running(vault, tmp_path) as daemon:
        (vault / "Work" / "Taxes.md").write_text(
            "# Taxes\n\nNow about baking: rye bread with a sour starter and a hot oven.\n",
            encoding="utf-8",
        )
        # The usual save-to-search wait: until the note is indexed, vectors included.
        daemon.search("rye", k=1, wait_for="Work/Taxes.md")
        found = daemon.request("GET", "/v1/notes/Home/Bread.md/related?k=2")["related"]
        assert "Work/Taxes.md" in [r["path"] for r in found]
        mine = daemon.request("GET", "/v1/notes/Work/Taxes.md/related?k=1")["related"]
        assert mine[0]["path"] in ("Home/Bread.md", "Home/Pizza.md")
        assert "rye bread" in mine[0]["source"]["text"]
