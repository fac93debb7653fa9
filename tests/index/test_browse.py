"""index/browse: the vault's tags with their counts, the notes changed lately, and a note's
outline read from disk."""

from __future__ import annotations

from pathlib import Path

from tests.storage.outcomes import written
from vaultd.answers import Heading
from vaultd.index.browse import outline, recent, tags
from vaultd.pipeline.discover import Discovery, IgnoreRules
from vaultd.storage.manifest import Manifest


def test_tags_are_counted_with_their_parents_and_filtered_by_prefix(manifest: Manifest) -> None:
    manifest.apply(
        [
            written("a.md", tags=["project/alpha"]),
            written("b.md", tags=["project/beta", "sea"]),
            written("c.md", tags=["sea"]),
        ]
    )
    counted = {t["tag"]: t["notes"] for t in tags(manifest)}
    assert counted["project"] == 2 and counted["sea"] == 2 and counted["project/alpha"] == 1
    assert {t["tag"] for t in tags(manifest, "#Project/")} == {
        "project",
        "project/alpha",
        "project/beta",
    }


def test_recent_notes_come_newest_first_with_their_time(manifest: Manifest) -> None:
    day = 86_400 * 10**9
    manifest.apply(
        [
            written("old.md", mtime_ns=1_700_000_000 * 10**9),
            written("new.md", mtime_ns=1_700_000_000 * 10**9 + day),
        ]
    )
    notes = recent(manifest, 5)
    assert [n["path"] for n in notes] == ["new.md", "old.md"]
    assert notes[0]["modified"] == "2023-11-15T22:13:20Z"
    assert [n["path"] for n in recent(manifest, 5, 1_700_000_000 * 10**9 + 1)] == ["new.md"]


def test_an_outline_gives_each_heading_its_sections_lines(tmp_path: Path) -> None:
    text = "# Top\n\nintro\n\n## One\n\nfirst\n\n## Two\n\nsecond\n\n# Next\n\nlast\n"
    (tmp_path / "a.md").write_text(text, encoding="utf-8")
    discovery = Discovery(tmp_path, IgnoreRules())
    assert outline(discovery, "a.md", 1 << 20) == [
        Heading(1, "Top", 1, 11),
        Heading(2, "One", 5, 7),
        Heading(2, "Two", 9, 11),
        Heading(1, "Next", 13, 15),
    ]
