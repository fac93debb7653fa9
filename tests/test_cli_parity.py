"""The CLI's query commands answer the same JSON with a daemon as without one, against one
index: the daemon serves what the CLI would compute from the index itself."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import BaseModel

from harness.daemon import short_socket_dir, start, write_config
from vaultd.cli import queries
from vaultd.cli.commands import main

Answers = dict[str, tuple[int, str, str]]

NOTES = {
    "Plugins/Canvas.md": (
        "---\ntags: [plugin/core]\naliases: [Board]\nstatus: done\n---\n# Canvas\n\n"
        "An infinite board for cards, notes and media.\n\n## Cards\n\n"
        "Cards hold text, notes or links. See [[Home]].\n"
    ),
    "Home.md": "# Home\n\nStart here, then open [[Canvas]] and lay cards on a board.\n",
    "Ideas/Garden.md": (
        "---\ntags: [garden]\nstatus: open\n---\n# Garden\n\n"
        "Tomatoes want the south wall. The canvas of the shed needs paint.\n"
    ),
    "Ideas/Board games.md": "# Board games\n\nCards and boards for an evening; the canvas bag.\n",
}

#: Each command with the options it is run with, both ways.
COMMANDS = {
    "search": ["search", "cards on a board", "--json", "-k", "5", "--tag", "plugin", "--explain"],
    "search-filters": [
        "search",
        "canvas",
        "--json",
        "--where",
        "status=open,done",
        "--since",
        "2000-01-01",
        "--any-tag",
        "garden",
        "--any-tag",
        "plugin",
        "--path",
        "Ideas/",
        "--kind",
        "note",
        "--snippets",
    ],
    "related": ["related", "Canvas", "--json", "-k", "3", "--since", "2000-01-01"],
    "mentions": ["mentions", "Canvas", "--json"],
    "backlinks": ["backlinks", "Canvas", "--json"],
    "outline": ["outline", "Canvas", "--json"],
    "note": ["note", "Canvas", "--json", "--text", "--start-line", "2", "--end-line", "4"],
    "note-lines": ["note", "Canvas", "--json", "--start-line", "2", "--end-line", "4"],
    "tags": ["tags", "--json"],
    "recent": ["recent", "--json", "-k", "3", "--since", "2000-01-01"],
    "export": ["export"],
}

#: For a person: the same lines both ways too.
TEXT = {"backlinks-text": ["backlinks", "Canvas"], "search-text": ["search", "board", "-k", "2"]}

#: A search asked to wait: a daemon waits; without one nothing indexes, so the same hits come at
#: once, saying so.
WAITING = {
    "search-wait": ["search", "cards on a board", "--json", "-k", "3", "--wait-for", "Home.md"],
    "search-wait-text": ["search", "board", "-k", "2", "--wait-for", "idle"],
}

#: And what they refuse: the same message and exit code both ways.
REFUSED = {
    "related-nowhere": ["related", "Nowhere", "--json"],
    "outline-nowhere": ["outline", "Nowhere", "--json"],
    "mentions-nowhere": ["mentions", "Nowhere", "--json"],
    "related-no-passage": ["related", "Canvas", "--json", "--lines", "100-200"],
    "note-past-its-end": ["note", "Canvas", "--json", "--text", "--start-line", "100"],
    "note-by-pages": ["note", "Canvas", "--json", "--text", "--start-page", "1"],
}


#: A value refused for a request field is refused naming the option (or argument) it was typed
#: as, not the API's field (`path_prefix`, `since`, `path`, `start_line`): each with what
#: stderr says.
NAMED = {
    "search-path-out": (["search", "canvas", "--path", "../a"], "vaultd: --path: not a path"),
    "search-since": (["search", "canvas", "--since", "yesterday"], "vaultd: --since: 'yesterday'"),
    "recent-since": (["recent", "--since", "-5"], "vaultd: --since: '-5' is out of range"),
    "note-out": (["note", "../Canvas.md", "--json"], "vaultd: NOTE: not a path"),
    "note-start-line": (["note", "Canvas", "--start-line", "0"], "value for '--start-line'"),
}


def _run_all(config: Path) -> dict[str, tuple[int, str, str]]:
    named = {name: args for name, (args, _) in NAMED.items()}
    return _run(config, {**COMMANDS, **TEXT, **WAITING, **REFUSED, **named})


def _run(config: Path, commands: dict[str, list[str]]) -> dict[str, tuple[int, str, str]]:
    runner = CliRunner()
    out: dict[str, tuple[int, str, str]] = {}
    for name, args in commands.items():
        result = runner.invoke(main, [*args, "--config", str(config)], env=dict(os.environ))
        out[name] = (result.exit_code, result.stdout, result.stderr)
    return out


def _taken(model: type[BaseModel], data: dict[str, Any]) -> BaseModel:
    """A request built as given, unchecked (a repeated option's tuple as the list it is)."""
    return model.model_construct(
        **{k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}
    )


def _unchecked(config: Path) -> dict[str, tuple[int, str, str]]:
    """NAMED asked of the daemon without the CLI's own check first (a fault: a client whose
    check lags the daemon's), so the daemon refuses them: named by its error's `field`."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(queries, "checked", _taken)
        named = _run(config, {name: args for name, (args, _) in NAMED.items()})
    return {f"unchecked:{name}": answer for name, answer in named.items()}


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Answers, Answers]]:
    root = tmp_path_factory.mktemp("parity")
    vault = root / "vault"
    for path, text in NOTES.items():
        (vault / path).parent.mkdir(parents=True, exist_ok=True)
        (vault / path).write_text(text, encoding="utf-8")
    socket = short_socket_dir() / "vaultd.sock"
    config = write_config(root / "vaultd.toml", vault, root / "data", socket)
    indexed = CliRunner().invoke(main, ["index", "--quiet", "--config", str(config)])
    assert indexed.exit_code == 0, indexed.output
    alone = _run_all(config)
    daemon = start(config, socket, root / "vaultd.log")
    try:
        daemon.wait_idle()
        served = {**_run_all(config), **_unchecked(config)}
    finally:
        daemon.stop()
    yield alone, served


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_same_json_with_and_without_a_daemon(
    command: str, answers: tuple[Answers, Answers]
) -> None:
    (code, alone, why), (_, served, _) = (answers[0][command], answers[1][command])
    assert code == 0, why
    without = [json.loads(line) for line in alone.splitlines()]
    with_daemon = [json.loads(line) for line in served.splitlines()]
    assert without and without[0] != {"hits": []}, alone
    assert with_daemon == without


@pytest.mark.parametrize("command", sorted(REFUSED))
def test_the_same_refusal_with_and_without_a_daemon(
    command: str, answers: tuple[Answers, Answers]
) -> None:
    (code, out, why), served = (answers[0][command], answers[1][command])
    assert code != 0 and not out and why.startswith("vaultd: "), why
    assert served == (code, out, why)


@pytest.mark.parametrize("command", sorted(NAMED))
def test_a_refused_value_is_named_as_the_option_typed_both_ways(
    command: str, answers: tuple[Answers, Answers]
) -> None:
    said = NAMED[command][1]
    alone, served = answers[0][command], answers[1][command]
    assert alone[0] == 2 and said in alone[2], alone
    assert served == alone
    assert answers[1][f"unchecked:{command}"] == alone


def test_wait_for_is_waited_on_by_a_daemon_and_said_not_to_be_without_one(
    answers: tuple[Answers, Answers],
) -> None:
    (code, alone, why), (served_code, served, served_why) = (
        answers[0]["search-wait"],
        answers[1]["search-wait"],
    )
    assert code == served_code == 0, (why, served_why)
    without, with_daemon = json.loads(alone), json.loads(served)
    assert with_daemon["hits"] and "not_waited" not in with_daemon, served
    assert without == {**with_daemon, "not_waited": "no_daemon"}
    (code, alone, why), served_text = answers[0]["search-wait-text"], answers[1]["search-wait-text"]
    assert code == 0 and alone == served_text[1] == answers[0]["search-text"][1], why
    assert "no daemon is running, so nothing was waited for" in why, why
    assert served_text[2] == "", served_text


def test_lines_asked_of_a_note_are_its_text(answers: tuple[Answers, Answers]) -> None:
    assert answers[0]["note-lines"] == answers[0]["note"]


def test_the_same_lines_for_a_person(answers: tuple[Answers, Answers]) -> None:
    for command in TEXT:
        assert answers[0][command][0] == 0, answers[0][command]
        assert answers[1][command] == answers[0][command], command
    assert answers[0]["backlinks-text"][1].splitlines() == [
        "Home.md  Home  (1 link)",
        "   line 3: Start here, then open [[Canvas]] and lay cards on a board.",
    ]
