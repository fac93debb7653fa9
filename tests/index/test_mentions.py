"""index/mentions: a note named in the text of notes that do not link to it, the name marked,
not where the reader does not see it (a link target, a URL)."""

from __future__ import annotations

from tests.storage.outcomes import written
from vaultd.index.mentions import names_of, unlinked_mentions
from vaultd.storage.manifest import Manifest


def test_names_come_from_the_title_the_file_name_and_the_aliases() -> None:
    row = {"title": "Lighthouse", "aliases": ["The Light", "x"]}
    assert names_of("places/Beacon.md", row) == ["Lighthouse", "Beacon", "The Light"]


def test_mentions_in_notes_not_linking_are_found_and_marked(manifest: Manifest) -> None:
    manifest.apply(
        [
            written("Lighthouse.md", ["the tower"]),
            written("walk.md", ["We walked to the lighthouse at dusk."]),
            written("linked.md", ["The lighthouse again."], links=["Lighthouse"]),
            written("url.md", ["See [the docs](https://example.com/lighthouse) first."]),
            written("other.md", ["Nothing here."]),
        ]
    )
    mentions = unlinked_mentions(manifest, "Lighthouse.md")
    assert mentions is not None
    assert [(m.path, m.name) for m in mentions] == [("walk.md", "Lighthouse")]
    assert mentions[0].text == "We walked to the **lighthouse** at dusk."
    assert mentions[0].start_line == 1

    assert unlinked_mentions(manifest, "absent.md") is None
    assert unlinked_mentions(manifest, "Lighthouse.md", k=0) == []
