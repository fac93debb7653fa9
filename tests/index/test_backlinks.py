"""A note's backlinks: the notes whose links resolve to it as Obsidian resolves them, each
with the passages holding the links, the note with the most links first."""

from __future__ import annotations

from pathlib import Path

from tests.small_vault import indexed
from vaultd.index.backlinks import backlinks_of

NOTES = {
    "Plugins/Canvas.md": "# Canvas\n\nAn infinite board. See [[#Cards]].\n\n## Cards\n\nCards.\n",
    "Home.md": (
        "# Home\n\nStart with [[Canvas]] for boards.\n\n"
        "## Later\n\nThen [[canvas.md|the board]] again.\n"
    ),
    "Notes/Board.md": "# Board\n\nBoards: [the canvas](../Plugins/Canvas.md).\n",
    "Linked.md": '---\nup: "[[Plugins/Canvas]]"\n---\n# Linked\n\nNo link in the text.\n',
    # Obsidian opens this folder's own Canvas for `[[Canvas]]`: no backlink of the plugin's.
    "Archive/Deep/Canvas.md": "# Old canvas\n\nArchived.\n",
    "Archive/Deep/Index.md": "# Index\n\nSee [[Canvas]].\n",
    "Unrelated.md": "# Unrelated\n\nA note about [[Gardens]] and canvas as a word.\n",
}


def test_backlinks_resolve_as_obsidian_and_carry_their_passages(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        found = backlinks_of(index.manifest, "Plugins/Canvas.md")
        archived = backlinks_of(index.manifest, "Archive/Deep/Canvas.md")
        none = backlinks_of(index.manifest, "Unrelated.md")
    assert [(b.path, b.title, b.links) for b in found] == [
        ("Home.md", "Home", 2),
        ("Linked.md", "Linked", 1),
        ("Notes/Board.md", "Board", 1),
    ]
    home = found[0]
    assert [p.link_lines for p in home.passages] == [(3,), (7,)]
    assert "[[Canvas]]" in home.passages[0].text
    assert "[[canvas.md|the board]]" in home.passages[1].text
    assert all(p.start_line <= p.link_lines[0] <= p.end_line for p in home.passages)
    # A link in front matter belongs to the note: counted, with no passage.
    assert found[1].passages == ()
    assert "../Plugins/Canvas.md" in found[2].passages[0].text
    assert [b.path for b in archived] == ["Archive/Deep/Index.md"]
    assert none == []
