"""storage/view: the manifest read for doctor, without writing a byte."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.storage.outcomes import failed, written
from vaultd.errors import StoreError
from vaultd.layout import MANIFEST
from vaultd.storage.manifest import Manifest
from vaultd.storage.quarantine import FailuresController
from vaultd.storage.schema import SCHEMA_VERSION
from vaultd.storage.view import read_manifest


def test_the_view_says_what_the_manifest_holds(tmp_path: Path) -> None:
    manifest = Manifest(tmp_path)
    note = written("a.md", ["one", "two"])
    manifest.apply([note, written("b.md"), failed("bad.md")])
    quarantining = FailuresController(manifest, quarantine_after=1)
    quarantining.record_failure(failed("held.md", reason="crashed"), when=1.0)
    manifest.set_meta("model", "m")
    manifest.set_meta("vault", "/v")
    manifest.add_vectors("m", {note.chunks[0].hash: np.zeros(4, np.float32)})
    manifest.close()
    before = (tmp_path / MANIFEST).read_bytes()

    view = read_manifest(tmp_path, None)
    assert (view.schema, view.integrity, view.vault, view.model) == (
        SCHEMA_VERSION,
        "ok",
        "/v",
        "m",
    )
    assert view.notes == 2
    assert view.chunk_ids == {"a.md#0", "a.md#1", "b.md#0"}
    assert view.troubled == (
        ("bad.md", "failed", "cannot parse"),
        ("held.md", "quarantined", "crashed"),
    )
    assert view.unembedded == 2
    assert read_manifest(tmp_path, "other").unembedded == 3
    assert (tmp_path / MANIFEST).read_bytes() == before


def test_a_missing_or_damaged_manifest_is_an_error_and_no_file_is_made(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        read_manifest(tmp_path, None)
    assert not (tmp_path / MANIFEST).exists()

    (tmp_path / MANIFEST).write_bytes(b"not a database at all" * 100)
    with pytest.raises(StoreError):
        read_manifest(tmp_path, None)
