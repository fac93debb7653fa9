"""Derived models: the graph vaultd runs, built once from the one a package ships.

The default model's file is int8 in storage only: its weights are int8 initializers that the
graph casts back to float and multiplies by a scale, so every product runs in fp32. The derived
model runs those products in int8 (see `recipe.py` for what is quantized and why). It is built
from the installed file, never downloaded: offline, in a few seconds, in a child process (the
`onnx` package and the build's few hundred MB of working memory stay out of the daemon).

The cache (`$XDG_CACHE_HOME/vaultd/models`, default `~/.cache/vaultd/models`; on macOS
`~/Library/Caches/vaultd/models`) holds, per source file and recipe, `KEY.onnx` and its record
`KEY.json`. The key is the source file's SHA-256, the recipe's name, the model's attention heads
and the versions of onnxruntime and onnx, so a new recipe or runtime builds afresh instead of
reusing what another made. The record holds the built file's SHA-256, checked before every
load: a damaged or partial file (or a record without one) is rebuilt. Builds take an exclusive
lock on `KEY.lock` and write beside the target before renaming into place, so two processes
building at once do not corrupt it and the second reuses what the first built.

This module owns the cache directory and every file in it.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import structlog

from vaultd.config import Precision
from vaultd.embedding.recipe import RECIPE
from vaultd.embedding.spec import ModelSpec, file_sha256, remember_verified, verify
from vaultd.errors import ModelError

log = structlog.get_logger(__name__)

#: What a derived model's id adds to its source's: its vectors are never mixed with the float
#: form's, so a switch is the usual model switch (a collection of its own).
ID_SUFFIX = {"int8": "@int8"}
#: How long a build may take before the child is given up on (it takes seconds).
BUILD_TIMEOUT = 600.0


@dataclass(frozen=True, slots=True)
class Derived:
    """One derived model in the cache, as its record describes it."""

    path: Path
    record: Path
    sha256: str
    source_sha256: str
    recipe: str
    seconds: float
    built: str


def cache_dir(env: Mapping[str, str]) -> Path:
    """Where derived models are kept: outside every vault, rebuilt if removed."""
    home = Path(env.get("HOME") or Path.home())
    value = env.get("XDG_CACHE_HOME", "")
    # The XDG spec says a relative value is invalid and must be ignored.
    if value and os.path.isabs(value):
        return Path(value) / "vaultd" / "models"
    if sys.platform == "darwin":
        return home / "Library" / "Caches" / "vaultd" / "models"
    return home / ".cache" / "vaultd" / "models"


def _versions() -> dict[str, str]:
    def version(package: str) -> str:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return "missing"

    return {"onnxruntime": version("onnxruntime"), "onnx": version("onnx")}


def _key(spec: ModelSpec, source_sha256: str) -> str:
    versions = _versions()
    return (
        f"{source_sha256[:16]}-{RECIPE}-h{spec.heads}"
        f"-ort{versions['onnxruntime']}-onnx{versions['onnx']}"
    )


def _source_sha256(spec: ModelSpec) -> str:
    if spec.onnx_sha256:
        verify(spec.onnx_path, spec.onnx_sha256)
        return spec.onnx_sha256
    return file_sha256(spec.onnx_path)


def model_id(source_id: str, precision: Precision) -> str:
    """The id of the vectors a model gives at `precision` (what its collection is named for)."""
    return source_id + ID_SUFFIX.get(precision, "")


def derived_spec(
    spec: ModelSpec,
    precision: Precision,
    cache: Path,
    *,
    on_build: Callable[[str], None] | None = None,
) -> ModelSpec:
    """The spec to run for `precision`: the source itself for "float", else the derived model
    (built first if the cache has no sound copy)."""
    if precision == "float":
        return spec
    derived = ensure(spec, cache, on_build=on_build)
    return dataclasses.replace(
        spec,
        id=model_id(spec.id, precision),
        onnx_path=derived.path,
        onnx_sha256=derived.sha256,
    )


def find(spec: ModelSpec, cache: Path) -> tuple[Derived | None, str]:
    """The sound derived model for `spec` in `cache`, or None and why there is none."""
    key = _key(spec, _source_sha256(spec))
    return _check(cache / f"{key}.onnx", cache / f"{key}.json")


def ensure(
    spec: ModelSpec,
    cache: Path,
    *,
    force: bool = False,
    on_build: Callable[[str], None] | None = None,
) -> Derived:
    """The derived model for `spec`, built into `cache` unless a sound one is there."""
    source_sha256 = _source_sha256(spec)
    key = _key(spec, source_sha256)
    target, record = cache / f"{key}.onnx", cache / f"{key}.json"
    if not force:
        found, _ = _check(target, record)
        if found is not None:
            return found
    _make_cache(cache)
    with _locked(cache / f"{key}.lock"):
        # Another process may have built it while this one waited for the lock.
        found, why = _check(target, record)
        if found is not None:
            if not force:
                return found
            why = "a rebuild was asked for"
        elif why != "not built yet":
            log.warning("rebuilding the derived model", path=str(target), reason=why)
        if on_build is not None:
            on_build(why)
        return _build(spec, source_sha256, target, record)


def _check(target: Path, record: Path) -> tuple[Derived | None, str]:
    if not record.exists() and not target.exists():
        return None, "not built yet"
    try:
        raw = json.loads(record.read_text(encoding="utf-8"))
        derived = Derived(
            path=target,
            record=record,
            sha256=str(raw["sha256"]),
            source_sha256=str(raw["source_sha256"]),
            recipe=str(raw["recipe"]),
            seconds=float(raw["seconds"]),
            built=str(raw["built"]),
        )
    except FileNotFoundError:
        return None, "its record is missing (an interrupted build)"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"its record {record} is unreadable ({exc})"
    # Hashed afresh on every check, not once per process as the source is: a long-running
    # daemon reopens the model after an idle unload, and the cache is easier to damage than
    # an installed package.
    try:
        actual = file_sha256(target)
    except ModelError as exc:
        return None, str(exc)
    if actual != derived.sha256:
        return None, f"{target} is damaged (sha256 {actual}, its record says {derived.sha256})"
    remember_verified(target, actual)
    return derived, "ok"


def _make_cache(cache: Path) -> None:
    try:
        cache.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise ModelError(
            f"cannot create the model cache {cache}: {exc.strerror or exc}. Make it writable, "
            'set XDG_CACHE_HOME to a directory you own, or set [embedding] precision = "float"'
        ) from exc


class _locked:
    """An exclusive lock on a file for the length of a build; released if the process dies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = -1

    def __enter__(self) -> None:
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError as exc:
            raise ModelError(f"cannot lock {self.path}: {exc.strerror or exc}") from exc

    def __exit__(self, *_: object) -> None:
        os.close(self.fd)


def _build(spec: ModelSpec, source_sha256: str, target: Path, record: Path) -> Derived:
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    start = time.monotonic()
    log.info("building the derived model (once)", source=str(spec.onnx_path), recipe=RECIPE)
    try:
        # A child process: the build's working memory goes back to the system when it ends,
        # and `-P` keeps the working directory (perhaps a vault) off its import path.
        done = subprocess.run(
            [
                sys.executable,
                "-P",
                "-m",
                "vaultd.embedding.recipe",
                str(spec.onnx_path),
                str(partial),
                f"--heads={spec.heads}",
            ],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
        if done.returncode != 0:
            raise ModelError(
                f"building the derived model from {spec.onnx_path} failed: "
                + (done.stderr.strip().splitlines() or ["no output"])[-1]
                + '. Set [embedding] precision = "float" to run the source model as it is'
            )
        for line in done.stderr.splitlines():
            if line.startswith("skipped "):
                log.info("the derived model's build " + line, model=spec.id)
        # Owner-only, whatever the umask: nobody else may swap in the graph this user runs.
        os.chmod(partial, 0o600)
        _fsync(partial)
        sha256 = file_sha256(partial)
        os.replace(partial, target)
    except subprocess.TimeoutExpired as exc:
        raise ModelError(f"building the derived model took over {BUILD_TIMEOUT:.0f} s") from exc
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise ModelError(f"no space left in {target.parent} for the derived model") from exc
        raise ModelError(f"cannot write the derived model {target}: {exc}") from exc
    finally:
        partial.unlink(missing_ok=True)
    seconds = round(time.monotonic() - start, 2)
    built = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    raw = {
        "sha256": sha256,
        "source_sha256": source_sha256,
        "source": str(spec.onnx_path),
        "recipe": RECIPE,
        **_versions(),
        "seconds": seconds,
        "built": built,
        "bytes": target.stat().st_size,
    }
    written = record.with_name(f"{record.name}.{os.getpid()}.partial")
    try:
        fd = os.open(written, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(raw, indent=1) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(written, record)
    except OSError as exc:
        written.unlink(missing_ok=True)
        raise ModelError(f"cannot write {record}: {exc}") from exc
    remember_verified(target, sha256)
    log.info("built the derived model", path=str(target), seconds=seconds, sha256=sha256)
    return Derived(target, record, sha256, source_sha256, RECIPE, seconds, built)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
