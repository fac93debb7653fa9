"""storage/metadata: what Chroma stores with each chunk, from a note as parsed or as recorded."""

from __future__ import annotations

from tests.storage.outcomes import written
from vaultd.records import Location
from vaultd.storage.manifest import Manifest
from vaultd.storage.metadata import chunk_metadata, links_within, stored_metadata


def test_a_chunks_metadata_leaves_empty_lists_and_unset_places_out() -> None:
    meta = chunk_metadata(
        path="sea/coast/a.md",
        title="A",
        tags=["project/alpha"],
        aliases=[],
        link_targets=["Pier", "Pier", "Dock"],
        section="Intro",
        headings=["A", "Intro"],
        index=0,
        start_line=1,
        end_line=4,
        mtime_ns=2_000_000_000,
        sha256="h",
        model_id="m",
    )
    assert meta["folders"] == ["sea", "sea/coast"]
    assert meta["tag_paths"] == ["project", "project/alpha"]
    assert meta["links"] == ["Dock", "Pier"]
    assert (meta["headings"], meta["mtime"], meta["kind"]) == ("A > Intro", 2.0, "note")
    assert "aliases" not in meta and "page" not in meta
    paged = chunk_metadata(**{**_plain(), "location": Location(page=3, page_end=4)})
    assert (paged["page"], paged["page_end"]) == (3, 4)


def _plain() -> dict[str, object]:
    return dict(path="a.md", title="A", tags=[], aliases=[], link_targets=[], section="",
                headings=[], index=0, start_line=1, end_line=1, mtime_ns=0, sha256="",
                model_id="m")  # fmt: skip


def test_a_chunk_carries_the_links_of_its_own_lines_and_the_front_matters() -> None:
    links = [("fm", None), ("early", 2), ("inside", 5), ("late", 9)]
    assert links_within(links, 4, 6) == ["fm", "inside"]


def test_a_recorded_chunk_gets_its_notes_recorded_fields(manifest: Manifest) -> None:
    manifest.apply([written("dir/a.md", ["one"], tags=["sea"], aliases=["Alpha"], mtime_ns=10**9)])
    chunk = manifest.notes.chunks_of("dir/a.md")[0]
    row = manifest.notes.row("dir/a.md")
    assert row is not None
    meta = stored_metadata(chunk, row, "m")
    assert (meta["path"], meta["tags"], meta["aliases"], meta["folders"]) == (
        "dir/a.md",
        ["sea"],
        ["Alpha"],
        ["dir"],
    )
    assert (meta["mtime"], meta["note_hash"], meta["model"]) == (1.0, row["sha256"], "m")
