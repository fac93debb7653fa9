from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from vaultd.storage.manifest import Manifest


@pytest.fixture
def manifest(tmp_path: Path) -> Iterator[Manifest]:
    """A new manifest in its own data directory, closed after the test."""
    opened = Manifest(tmp_path / "data")
    yield opened
    opened.close()
