"""Which model serves a vault: the `[embedding] model` setting resolved, `"auto"` included.

`"auto"` keeps the model an index was built with (once it holds chunks), and for a new index
takes the multilingual model when a sample of the vault's notes is mostly not English
(`vaultd.pipeline.languages`) and the package holding it is installed, else the default. The
index, `vaultd inspect`, `vaultd model build` and `vaultd doctor` all resolve it here.

This module owns the manifest's meta keys `model` and `languages`.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import structlog

from vaultd.config import Config
from vaultd.embedding.derive import source_of
from vaultd.embedding.spec import (
    DEFAULT_MODEL_ID,
    INSTALL_MULTILINGUAL,
    MULTILINGUAL_MODEL_ID,
    multilingual_spec,
)
from vaultd.errors import ModelError, NoteUnavailableError, VaultdError
from vaultd.layout import MANIFEST
from vaultd.pipeline.discover import Discovery, IgnoreRules
from vaultd.pipeline.languages import Languages, measure

log = structlog.get_logger(__name__)

#: Manifest meta keys: the id of the model the index's vectors are of, and the last measure of
#: the vault's scripts (JSON, `Languages.as_dict`).
MODEL_META = "model"
LANGUAGES_META = "languages"
#: How much of the vault a measure reads: notes spread over it, the start of each.
SAMPLE_NOTES = 300
SAMPLE_BYTES = 16 * 1024
#: The named models by the id of their vectors' source.
_NAMED = {DEFAULT_MODEL_ID: "default", MULTILINGUAL_MODEL_ID: "multilingual"}


def sample(discovery: Discovery) -> Iterator[str]:
    """The start of up to SAMPLE_NOTES notes spread over the vault; nothing if it cannot be
    walked (the indexer reports that)."""
    try:
        states = list(discovery.walk())
    except (VaultdError, OSError):
        return
    step = max(1, math.ceil(len(states) / SAMPLE_NOTES))
    for state in itertools.islice(states[::step], SAMPLE_NOTES):
        try:
            fd = discovery.open_note(state.path)
        except (OSError, NoteUnavailableError):
            continue
        with open(fd, "rb") as handle:
            data = handle.read(SAMPLE_BYTES)
        yield data.decode("utf-8", errors="ignore")


def vault_languages(config: Config) -> Languages:
    """The measure of the configured vault (nothing measured when there is none)."""
    vault = config.vault.path
    if vault is None or not vault.is_dir():
        return measure([])
    return measure(sample(Discovery(vault, IgnoreRules.from_config(config.vault))))


def choose(recorded: str | None, languages: Callable[[], Languages]) -> str:
    """What `"auto"` runs: the named model `recorded` (the id of an index's vectors, None for
    an index that holds none yet) is of, else the choice for what `languages` measures."""
    # A pair's vectors (vaultd.embedding.paired) are named for their first model.
    source = None if recorded is None else source_of(recorded.split("+")[0])
    if source in _NAMED:
        return _NAMED[source]
    measured = languages()
    if measured.mostly_english():
        log.info("model chosen: the default (English)", languages=measured.describe())
        return "default"
    try:
        multilingual_spec()
    except ModelError:
        log.warning(
            "most of the vault is not English, which the default model serves poorly; "
            f"install the multilingual model with {INSTALL_MULTILINGUAL}",
            languages=measured.describe(),
        )
        return "default"
    log.info(
        "model chosen: multilingual (most of the vault is not English)",
        languages=measured.describe(),
    )
    return "multilingual"


def resolve(config: Config) -> str:
    """`[embedding] model` as `load_spec` takes it, for a command that does not open the index
    (it reads the recorded model, if any, without writing)."""
    setting = config.embedding.model
    if setting != "auto":
        return setting
    return choose(recorded_model(config.store.path), lambda: vault_languages(config))


def recorded_model(data_dir: Path | None) -> str | None:
    """The id of the vectors an existing index holds, None when it holds none (or there is
    no index, or it cannot be read)."""
    from vaultd.storage.view import read_manifest

    if data_dir is None or not (data_dir / MANIFEST).is_file():
        return None
    try:
        view = read_manifest(data_dir, None)
    except VaultdError:
        return None
    return view.model if view.chunk_ids else None


def languages_of(raw: str | None) -> dict[str, object] | None:
    """The recorded measure (LANGUAGES_META's value), or None."""
    if raw is None:
        return None
    try:
        found = json.loads(raw)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None
