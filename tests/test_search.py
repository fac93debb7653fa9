"""Search through its interfaces: the filters as typed (`vaultd.query`), the CLI's flags and
--explain, and the socket API's checks (the search itself: tests/index/test_search.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.index.test_search import NOTES, OLD, OLD_NOTES
from tests.small_vault import indexed
from vaultd.api.server import Api
from vaultd.cli.commands import main
from vaultd.daemon.serving import DaemonService
from vaultd.daemon.state import State
from vaultd.errors import ApiError, QueryError
from vaultd.index.open import Index
from vaultd.query import parse_since, parse_where, parse_where_flag


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    mtimes = {rel: float(OLD) for rel in OLD_NOTES}
    with indexed(tmp_path_factory.mktemp("search"), NOTES, mtimes) as idx:
        yield idx


def test_bad_filters_are_query_errors() -> None:
    for where in (
        {"year": {"$between": [1, 2]}},
        {"year": {"$gt": "soon"}},
        {"year": [1, 2]},
        {"year": {"$in": "2020"}},
        {"year": {"$gte": 2**70}},
        {"": 1},
    ):
        with pytest.raises(QueryError):
            parse_where(where)
    for since in ("yesterday", -5, 1e300):
        with pytest.raises(QueryError):
            parse_since(since)
    with pytest.raises(QueryError):
        parse_where_flag("no operator")


def test_cli_where_flags() -> None:
    assert parse_where_flag("status=done").value == "done"
    assert parse_where_flag("year>=2020").op == "gte"
    assert parse_where_flag("year>=2020").value == 2020
    assert parse_where_flag("due<2025-01-01").value == "2025-01-01"
    flag = parse_where_flag("status=a, b")
    assert (flag.op, flag.value) == ("in", ("a", "b"))
    assert parse_where_flag("draft=true").value is True


def test_cli_flags_and_explain(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    for rel in ("Garden/Tomatoes.md", "Garden/Roses.md", "Kitchen/Sauce.md", "Kitchen/Bread.md"):
        (vault / rel).parent.mkdir(exist_ok=True)
        (vault / rel).write_text(NOTES[rel], encoding="utf-8")
    os.utime(vault / "Kitchen/Bread.md", (OLD, OLD))
    config = tmp_path / "c.toml"
    config.write_text(
        f'[vault]\npath = "{vault}"\n[store]\npath = "{tmp_path / "data"}"\n'
        '[log]\nlevel = "warning"\n',
        encoding="utf-8",
    )

    def cli(*args: str) -> Any:
        result = CliRunner().invoke(main, [*args, "--config", str(config)])
        assert result.exit_code == 0, result.output
        return result.output

    cli("index", "-q")
    out = json.loads(
        cli(
            "search",
            "tomato",
            "--json",
            "--where",
            "year>=2020",
            "--where",
            "status=done,x",
            "--any-tag",
            "garden",
            "--any-tag",
            "cooking",
            "--since",
            "2021-01-01",
        )
    )
    assert {h["path"] for h in out["hits"]} == {"Garden/Tomatoes.md", "Kitchen/Sauce.md"}
    out = json.loads(cli("search", "bread", "--json", "--tag", "home", "--path", "Kitchen"))
    assert [h["path"] for h in out["hits"]] == ["Kitchen/Bread.md"]
    text = cli("search", '"olive oil"', "--explain", "-k", "1")
    assert "Kitchen/Sauce.md" in text
    assert "keyword #1" in text and "vector #" in text and "fusion" in text
    assert "exact phrase: first tier" in text
    bad = CliRunner().invoke(main, ["search", "x", "--where", "year>soon", "--config", str(config)])
    assert bad.exit_code == QueryError.exit_code and "ISO date" in bad.output


# -- the API -------------------------------------------------------------------------------------


def api_search(index: Index, body: dict[str, Any]) -> tuple[HTTPStatus, Any]:
    api = Api(DaemonService(index, State(), lambda: None, dict))
    return api.handle("POST", "/v1/search", json.dumps(body).encode())


def test_api_takes_every_filter(index: Index) -> None:
    status, body = api_search(
        index,
        {
            "query": "tomatoes",
            "k": 20,
            "mode": "hybrid",
            "tags_any": ["garden", "cooking"],
            "where": {"year": {"$gte": 2020}, "status": {"$in": ["done"]}},
            "modified_since": "2021-01-01",
            "per_note": 1,
            "merge": True,
            "explain": True,
        },
    )
    assert status == HTTPStatus.OK
    assert {h["path"] for h in body["hits"]} == {"Garden/Tomatoes.md", "Kitchen/Sauce.md"}
    assert {"keyword", "vector", "fusion"} <= set(body["hits"][0]["explain"])


def test_the_api_and_the_query_leave_out_tags_and_folders(index: Index) -> None:
    def found(body: dict[str, Any]) -> set[str]:
        status, answer = api_search(index, {"k": 20, "mode": "keyword", **body})
        assert status == HTTPStatus.OK, answer
        return {h["path"] for h in answer["hits"]}

    everything = found({"query": "tomatoes roses sauce bread"})
    assert {"Garden/Tomatoes.md", "Garden/Roses.md", "Kitchen/Sauce.md"} <= everything
    # `garden` leaves out `garden/veg` and `garden/flowers` too.
    assert found({"query": "tomatoes roses sauce bread", "exclude_tags": ["garden"]}) == (
        everything - {"Garden/Tomatoes.md", "Garden/Roses.md"}
    )
    assert found({"query": "tomatoes roses sauce bread -tag:#Garden"}) == (
        everything - {"Garden/Tomatoes.md", "Garden/Roses.md"}
    )
    assert found({"query": "tomatoes roses sauce bread", "exclude_paths": ["Kitchen/"]}) == {
        p for p in everything if not p.startswith("Kitchen/")
    }
    # Written in the query, joined to the request's: both leave out.
    asked = {"query": "tomatoes roses sauce bread -path:Kitchen", "exclude_tags": ["garden/veg"]}
    assert found(asked) == {
        p for p in everything if not p.startswith("Kitchen/") and p != "Garden/Tomatoes.md"
    }
    # Inside quotes it is words.
    assert "Kitchen/Sauce.md" in found({"query": 'sauce "-path:Kitchen"'})
    with pytest.raises(ApiError) as caught:
        api_search(index, {"query": "tomatoes -path:../etc"})
    assert caught.value.status == HTTPStatus.BAD_REQUEST


@pytest.mark.parametrize(
    "body",
    [
        {"where": {"year": {"$gt": "soon"}}},
        {"where": [1]},
        {"where": {"year": {"$nope": 1}}},
        {"tags_any": "garden"},
        {"modified_since": "yesterday"},
        {"modified_since": True},
        {"per_note": -1},
        {"per_note": "3"},
        {"merge": "yes"},
    ],
)
def test_api_rejects_bad_filters(index: Index, body: dict[str, Any]) -> None:
    with pytest.raises(ApiError) as caught:
        api_search(index, {"query": "tomatoes", **body})
    assert caught.value.status == HTTPStatus.BAD_REQUEST
