"""A benchmark's working directory kept between runs."""

from __future__ import annotations

import shutil
from pathlib import Path


def vault_copy(source: Path, work: Path) -> Path:
    """`work/vault`: a copy of `source` made on the first run and reused after, so an index
    kept in `work` re-indexes only what changed (for the same vault, nothing). The corpora
    themselves are never indexed in place."""
    vault = work / "vault"
    if not vault.exists():
        shutil.copytree(source, vault)
    return vault
