"""Nothing lost, nothing extra: an index compared record by record with a fresh index."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from harness.daemon import RunningDaemon, short_socket_dir, write_config
from vaultd.config import load_config
from vaultd.index.export import export_records
from vaultd.index.open import open_index

Records = list[dict[str, Any]]


def export_of(config_path: Path, env: Mapping[str, str] | None = None) -> Records:
    """What `vaultd export --vectors` prints for this config (the daemon must be stopped)."""
    env = {} if env is None else env
    config = load_config(config_path, env=env)
    with open_index(config, env=env) as index:
        return list(export_records(index.store, with_vectors=True))


def fresh_export(
    vault: Path, workdir: Path, *, extra: str = "", env: Mapping[str, str] | None = None
) -> Records:
    """The export of a fresh index of `vault` as it is now, built in `workdir`."""
    env = {} if env is None else env
    workdir.mkdir(parents=True, exist_ok=True)
    config = write_config(
        workdir / "fresh.toml",
        vault,
        workdir / "fresh-data",
        short_socket_dir() / "s",
        extra=extra,
    )
    loaded = load_config(config, env=env)
    with open_index(loaded, env=env) as index:
        index.indexer.reconcile()
        return list(export_records(index.store, with_vectors=True))


def assert_same(mine: Records, theirs: Records) -> None:
    assert [r["id"] for r in mine] == [r["id"] for r in theirs]
    for a, b in zip(mine, theirs, strict=True):
        assert a["document"] == b["document"], a["id"]
        assert a["metadata"] == b["metadata"], a["id"]
        assert np.allclose(a["vector"], b["vector"], atol=1e-5), a["id"]


def assert_converged(
    daemon: RunningDaemon, vault: Path, workdir: Path, *, extra: str = ""
) -> Records:
    """Wait until the daemon is idle, stop it, and compare its export with a fresh index.

    `extra` is config text the fresh index needs too (ignore rules, say). Returns the export.
    """
    if daemon.process.poll() is None:
        daemon.wait_idle()
        assert daemon.stop() == 0, daemon.log_text()
    mine = export_of(daemon.config)
    assert_same(mine, fresh_export(vault, workdir / "reference", extra=extra))
    return mine
