"""index/open: an index opened on a locked data directory that serves one vault, one model
shape and a chromadb no newer than the installed one; read-only commands never create one."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.small_vault import write_vault
from vaultd.config import load_config
from vaultd.errors import LockedError, NotIndexedError, StoreMismatchError
from vaultd.index.models import MODEL_META
from vaultd.index.open import CHROMADB_META, DIMENSIONS_META, open_index
from vaultd.storage.manifest import Manifest

NOTES = {"a.md": "# A\n\nThe keeper climbs the stairs.\n"}


def test_a_read_only_open_of_a_vault_never_indexed_creates_nothing(tmp_path: Path) -> None:
    config = load_config(write_vault(tmp_path, NOTES), env={})
    with pytest.raises(NotIndexedError), open_index(config, env={}, create=False):
        pass
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())


def test_an_open_records_its_vault_and_model_and_keeps_the_data_private(tmp_path: Path) -> None:
    config = load_config(write_vault(tmp_path, NOTES), env={})
    with open_index(config, env={}) as index:
        assert index.vault == tmp_path / "vault"
        assert index.manifest.get_meta("vault") == str(index.vault)
        assert index.manifest.get_meta(MODEL_META) == index.embedder.model_id
        assert index.manifest.get_meta(CHROMADB_META)
        index.indexer.reconcile()
        with pytest.raises(LockedError), open_index(config, env={}):
            pass  # one process at a time in a data directory
    assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
    with open_index(config, env={}, create=False) as again:
        assert again.manifest.notes.paths() == ["a.md"]


def test_another_vault_is_refused_its_data_directory(tmp_path: Path) -> None:
    with open_index(load_config(write_vault(tmp_path, NOTES), env={}), env={}):
        pass
    other = tmp_path / "other"
    other.mkdir()
    config = write_vault(other, NOTES)
    # The other vault, pointed at the first one's data directory.
    text = config.read_text().replace(str(other / "data"), str(tmp_path / "data"))
    config.write_text(text)
    mixed = load_config(config, env={})
    with pytest.raises(StoreMismatchError, match="holds the index of"), open_index(mixed, env={}):
        pass


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [(CHROMADB_META, "999.0", "newer than the installed"), (DIMENSIONS_META, "7", "dimensions")],
)
def test_a_store_it_cannot_use_is_refused(
    tmp_path: Path, key: str, value: str, message: str
) -> None:
    config = load_config(write_vault(tmp_path, NOTES), env={})
    with open_index(config, env={}) as index:
        index.indexer.reconcile()
    manifest = Manifest(tmp_path / "data")
    manifest.set_meta(key, value)
    manifest.close()
    with pytest.raises(StoreMismatchError, match=message), open_index(config, env={}):
        pass
