"""index/export: every record the store holds, sorted by id, vectors only when asked."""

from __future__ import annotations

from pathlib import Path

from tests.small_vault import indexed
from vaultd.index import export
from vaultd.index.export import export_records

NOTES = {
    "a.md": "# One\n\nFirst section text.\n\n# Two\n\nSecond section text.\n",
    "b.md": "Only a line.\n",
}


def test_the_export_is_the_store_sorted_by_id(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        lines = list(export_records(index.store))
        ids = [line["id"] for line in lines]
        assert ids == sorted(index.store.ids())
        assert {line["metadata"]["path"] for line in lines} == {"a.md", "b.md"}
        assert all(set(line) == {"id", "document", "metadata"} for line in lines)
        assert any("Second section text." in line["document"] for line in lines)


def test_vectors_are_given_rounded_when_asked_and_paging_loses_none(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        whole = list(export_records(index.store, with_vectors=True))
        vector = whole[0]["vector"]
        assert len(vector) > 1
        assert all(isinstance(x, float) and round(x, 7) == x for x in vector)

        page, export.PAGE = export.PAGE, 1
        try:
            assert list(export_records(index.store, with_vectors=True)) == whole
        finally:
            export.PAGE = page
