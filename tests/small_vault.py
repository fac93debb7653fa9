"""A small vault written from a dict of notes and indexed for real (the model, Chroma, the
manifest), and its socket API's answers without a socket: shared by the tests of what an index
answers."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http import HTTPStatus
from pathlib import Path
from typing import Any

from vaultd.api.server import Api
from vaultd.config import load_config
from vaultd.daemon.serving import DaemonService
from vaultd.daemon.state import State
from vaultd.index.open import Index, open_index


def write_vault(
    root: Path, notes: Mapping[str, str | bytes], mtimes: Mapping[str, float] = {}
) -> Path:
    """`notes` (vault path: text, or bytes as they are) under `root/vault`, with the given
    modification times; the config file of an index of it in `root/data`."""
    vault = root / "vault"
    for path, text in notes.items():
        file = vault / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
        if path in mtimes:
            os.utime(file, (mtimes[path], mtimes[path]))
    config = root / "c.toml"
    config.write_text(
        f'[vault]\npath = "{vault}"\n[store]\npath = "{root / "data"}"\n[log]\nlevel = "error"\n',
        encoding="utf-8",
    )
    return config


@contextmanager
def indexed(
    root: Path, notes: Mapping[str, str | bytes], mtimes: Mapping[str, float] = {}
) -> Iterator[Index]:
    """The open index of `notes`, fully indexed."""
    config = write_vault(root, notes, mtimes)
    with open_index(load_config(config, env={}), env={}) as opened:
        opened.indexer.reconcile()
        yield opened


def api(index: Index, target: str) -> tuple[HTTPStatus, Any]:
    """A GET of the socket API, answered in process."""
    return Api(DaemonService(index, State(), lambda: None, dict)).handle("GET", target, b"")
