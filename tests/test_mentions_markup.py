"""Unlinked mentions and Markdown: a name inside a URL or a link's target is no mention, and
the mark lands on the name, not on the emphasis around it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.small_vault import indexed
from vaultd.index.mentions import unlinked_mentions
from vaultd.index.open import Index

NOTES = {
    "Plugins/Canvas.md": "# Canvas\n\nA board of cards and arrows.\n",
    "Tips.md": "# Tips\n\nRead https://example.com/Canvas-tips for more.\n",
    "Guide.md": "# Guide\n\nSee [the guide](https://help.example.com/plugins/Canvas) today.\n"
    "Or <https://example.org/canvas>, or www.example.net/Canvas/intro.\n",
    "Bold.md": "# Bold\n\nI plan the week on a **Canvas** board.\n",
    "Phrase.md": "# Phrase\n\nThe **Canvas board** holds it; see https://x.org/Canvas.\n",
    "Italic.md": "# Italic\n\n_Canvas_ first, then __canvas__ and *Canvas*, ==Canvas== too.\n",
    "Label.md": "# Label\n\nThe [Canvas docs](https://example.com/docs) are short.\n",
    "Plain.md": "# Plain\n\nsnake_case_Canvas_name is a word of its own, but a Canvas is not.\n",
}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    with indexed(tmp_path_factory.mktemp("mentions"), NOTES) as opened:
        yield opened


def mentions(index: Index) -> dict[str, str]:
    found = unlinked_mentions(index.manifest, "Plugins/Canvas.md")
    assert found is not None
    return {m.path: m.text for m in found}


def test_a_name_inside_a_url_or_a_link_target_is_no_mention(index: Index) -> None:
    found = mentions(index)
    assert "Tips.md" not in found and "Guide.md" not in found
    # The link's text is what a reader sees: that one names the note.
    assert found["Label.md"] == "The [**Canvas** docs](https://example.com/docs) are short."


def test_the_mark_is_on_the_name_not_on_the_emphasis_around_it(index: Index) -> None:
    found = mentions(index)
    assert found["Bold.md"] == "I plan the week on a **Canvas** board."
    assert found["Phrase.md"] == "The **Canvas** board holds it; see https://x.org/Canvas."
    assert found["Italic.md"] == "**Canvas** first, then **canvas** and **Canvas**, **Canvas** too."
    plain = "snake_case_Canvas_name is a word of its own, but a **Canvas** is not."
    assert found["Plain.md"] == plain
