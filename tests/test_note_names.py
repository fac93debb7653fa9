"""A note is taken by its name as Obsidian takes it, as well as by its path: by the index, the
socket API (so the daemon's clients and the MCP tools) and the CLI without a daemon."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.small_vault import api, indexed, write_vault
from vaultd.cli.commands import main
from vaultd.errors import ApiError
from vaultd.index.names import note_named

NOTES = {
    "Plugins/Canvas.md": "# Canvas\n\nAn infinite board for cards, notes and media.\n",
    "Home.md": "# Home\n\nStart here, then see [[Canvas]].\n",
    "Board.md": "# Board\n\nThe canvas plugin lays notes out on a board.\n",
    # Two notes of one name: Obsidian opens the one nearest the vault's root.
    "Archive/Old/Ideas.md": "# Ideas\n\nOld ideas about gardens.\n",
    "Work/Ideas.md": "# Ideas\n\nNew ideas about boards.\n",
    "Daily.md": "# Daily\n\nToday.\n",
    "Journal/Daily.md": "# Daily\n\nA journal entry.\n",
}


def test_a_name_resolves_as_obsidian_resolves_it(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        manifest = index.manifest
        named = {
            name: note_named(manifest, name)
            for name in (
                "Plugins/Canvas.md",
                "Canvas",
                "Canvas.md",
                "canvas",
                "CANVAS.MD",
                "Plugins/Canvas",
                "plugins/canvas",
                "Ideas",
                "Old/Ideas",
                "Daily",
                "Journal/Daily",
                "Nowhere",
                "Other/Canvas",
            )
        }
        status, outline = api(index, "/v1/notes/canvas/outline")
        _, note = api(index, "/v1/notes/Canvas?text=1")
        _, mentions = api(index, "/v1/notes/Canvas/mentions")
        _, related = api(index, "/v1/notes/Canvas.md/related?k=2")
        with pytest.raises(ApiError) as missing:
            api(index, "/v1/notes/Nowhere")
    assert named == {
        "Plugins/Canvas.md": "Plugins/Canvas.md",
        "Canvas": "Plugins/Canvas.md",
        "Canvas.md": "Plugins/Canvas.md",
        "canvas": "Plugins/Canvas.md",
        "CANVAS.MD": "Plugins/Canvas.md",
        "Plugins/Canvas": "Plugins/Canvas.md",
        "plugins/canvas": "Plugins/Canvas.md",
        "Ideas": "Work/Ideas.md",  # fewer folders wins
        "Old/Ideas": "Archive/Old/Ideas.md",  # a folder of its path picks the other
        "Daily": "Daily.md",  # the root first
        "Journal/Daily": "Journal/Daily.md",
        "Nowhere": None,
        "Other/Canvas": None,  # a folder given must be its folder
    }
    assert status == 200 and outline["path"] == "Plugins/Canvas.md"
    assert [h["text"] for h in outline["headings"]] == ["Canvas"]
    assert note["path"] == "Plugins/Canvas.md" and note["text"].startswith("# Canvas")
    assert note["backlinks"] == ["Home.md"]
    assert mentions["path"] == "Plugins/Canvas.md"
    assert related["path"] == "Plugins/Canvas.md" and related["related"]
    assert missing.value.status == 404 and missing.value.message == "no indexed note 'Nowhere'"


def test_the_cli_takes_a_name_without_a_daemon(tmp_path: Path) -> None:
    config = write_vault(tmp_path, NOTES)
    runner = CliRunner()
    assert runner.invoke(main, ["index", "--config", str(config), "-q"]).exit_code == 0
    answers = {}
    for command in (
        ["related", "Canvas", "-k", "2"],
        ["mentions", "canvas"],
        ["outline", "Canvas"],
    ):
        done = runner.invoke(main, [*command, "--json", "--config", str(config)])
        assert done.exit_code == 0, (command, done.output)
        answers[command[0]] = json.loads(done.output)
    missing = runner.invoke(main, ["outline", "Nowhere", "--config", str(config)])
    assert {name: answer["path"] for name, answer in answers.items()} == {
        "related": "Plugins/Canvas.md",
        "mentions": "Plugins/Canvas.md",
        "outline": "Plugins/Canvas.md",
    }
    assert answers["mentions"]["mentions"][0]["path"] == "Board.md"
    assert missing.exit_code == 2 and "Nowhere is not an indexed note" in missing.output
