"""What every `vaultd` command shares: clean errors, the --config and --vault options, the
configuration loaded, the vault's running daemon found, and what answers a query: that daemon
or, with none, the index (`DaemonOrIndex`, which the MCP bridge answers with too).

User-facing errors (`VaultdError`) become one clean message and the error's exit code; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from functools import partial, wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from vaultd.errors import (
    DaemonError,
    DaemonStoppedError,
    LockedError,
    NoteError,
    NotReadyError,
    QueryError,
    VaultdError,
)
from vaultd.storage.lock import READERS, Holder

if TYPE_CHECKING:
    from vaultd.api.client import Client
    from vaultd.index.open import Index

F = TypeVar("F", bound=Callable[..., Any])

CONFIG_HELP = (
    "TOML configuration file. Default: $VAULTD_CONFIG, else "
    "$XDG_CONFIG_HOME/vaultd/config.toml when it exists."
)
VAULT_HELP = "The vault folder (overrides [vault] path)."


def handle_errors(func: F) -> F:
    """`func` as a command whose VaultdErrors end it cleanly; its --config and --vault are
    carried into every command its messages suggest (vaultd.hints)."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from vaultd import hints

        ctx = click.get_current_context(silent=True)
        root = ctx.find_root().command if ctx is not None else None
        hints.given(
            kwargs.get("config_file"),
            kwargs.get("vault"),
            None if root is None else partial(options_of, root),
        )
        try:
            return func(*args, **kwargs)
        except VaultdError as exc:
            from vaultd.logs import for_stderr

            said = str(exc)
            if isinstance(exc, QueryError) and exc.field:
                said = exc.naming(typed(exc.field))
            click.echo(for_stderr(f"vaultd: {said}"), err=True)
            sys.exit(exc.exit_code)

    return wrapper  # type: ignore[return-value]


def options_of(root: click.Command, words: Sequence[str]) -> frozenset[str]:
    """The options of the command `vaultd WORDS...` (its first words that name commands)."""
    found = root
    for word in words:
        if not isinstance(found, click.Group) or word not in found.commands:
            break
        found = found.commands[word]
    return frozenset(o for p in found.params if isinstance(p, click.Option) for o in p.opts)


def typed(field: str) -> str:
    """How the running command takes a request field: the option or the argument's metavar
    (`--path` for `path_prefix`, NOTE for `path`). Each of its parameters that fills a field is
    named for it (vaultd.cli.queries), so a refusal naming the field names what was typed, with
    a daemon (its error's `field`) or without one (the model's). A field it does not take
    stays as the API names it."""
    ctx = click.get_current_context(silent=True)
    for param in ctx.command.params if ctx is not None else ():
        if param.name == field:
            return param.opts[0] if isinstance(param, click.Option) else param.human_readable_name
    return field


# Each use of a click.option decorator declares an option of its own.
config_option = click.option(
    "--config", "config_file", type=click.Path(path_type=Path, dir_okay=False), help=CONFIG_HELP
)
vault_option = click.option(
    "--vault", type=click.Path(path_type=Path, file_okay=False), help=VAULT_HELP
)


def vault_command(func: F) -> F:
    """What every command over a vault takes: --config and --vault, its errors said cleanly."""
    return config_option(vault_option(handle_errors(func)))


def json_option(help: str) -> Callable[[F], F]:
    return click.option("--json", "as_json", is_flag=True, help=help)


def daemon(config: Any) -> Client | None:
    """A client for the running daemon of this vault, or None when none answers.

    Only that vault's daemon: see vaultd.api.locate. A configured socket served by another vault's
    daemon raises VaultMismatchError.
    """
    from vaultd.api.locate import find_daemon

    if config.vault.path is None:
        return None
    return find_daemon(
        config.server.socket, config.require_vault(), config.require_store(), os.environ
    )


#: What a daemon that answered said (vaultd.api.client.refused): its answer, not a daemon gone.
_ANSWERED = (DaemonError, QueryError, NoteError, NotReadyError)

#: How long a command that would open the index waits while the lock's holder only passes
#: through: a reader (another query, `status`) lets go within a second or two, a daemon that
#: is starting answers on its socket once it has opened the index (a few seconds; more on a
#: busy machine or for a large store). Anything else that holds the lock is refused at once.
PATIENCE = 60.0
#: How often the lock and the socket are tried again meanwhile.
POLL = 0.1


def index_or_daemon(
    stack: ExitStack, config: Any, holder: Holder, locate: Callable[[], Client | None]
) -> Index | Client:
    """The index, opened into `stack` as `holder`; or the daemon `locate` finds, when one came
    up while the lock was waited for (see PATIENCE). Says once on stderr what it waits for."""
    from vaultd.api.locate import starting
    from vaultd.index.open import open_index
    from vaultd.storage.lock import LockHolder

    deadline = time.monotonic() + PATIENCE
    said = False
    while True:
        try:
            return stack.enter_context(open_index(config, create=False, holder=holder))
        except DaemonStoppedError:
            raise
        except LockedError as exc:
            client = locate()
            if client is not None:
                return client
            who = LockHolder(exc.pid, Holder.named(exc.holder)).describe()
            if exc.holder in READERS:
                waiting = f"waiting for {who} to let go of the index"
            elif exc.holder == Holder.DAEMON and starting(config.require_store(), exc.pid):
                waiting = f"{who} is starting; waiting for it to answer"
            else:
                raise
            if time.monotonic() >= deadline:
                raise
            if not said:
                click.echo(f"vaultd: {waiting}", err=True)
                said = True
        time.sleep(POLL)


class DaemonOrIndex:
    """The vault's daemon while one answers (RemoteService); when none does (never started, or
    gone since) the index opened read-only for the call, one call at a time (LocalService, the
    code the daemon answers with). A daemon is looked for again at every call, and the lock is
    held only while a call runs, so a daemon started later is not kept out.

    `config` None: no index to fall back to; `fix` says what to do then. `holder`: what this
    process is, in the lock file (a query, the MCP bridge)."""

    def __init__(
        self,
        locate: Callable[[], Client | None],
        config: Any,
        fix: str | None = None,
        holder: Holder = Holder.QUERY,
    ) -> None:
        self._locate = locate
        self._config = config
        self._fix = fix
        if fix is None:
            from vaultd.hints import suggest

            self._fix = f"start it with {suggest('run')}"
        self._holder = holder
        self.client: Client | None = None
        # open_index takes the data directory's lock: two calls at once would refuse each other.
        self._one_at_a_time = threading.Lock()

    @classmethod
    def of(cls, config: Any, holder: Holder = Holder.QUERY) -> DaemonOrIndex:
        """The configured vault's daemon, else its index."""
        return cls(lambda: daemon(config), config, holder=holder)

    def find(self) -> Client | None:
        """The daemon answering now, if one does (raises VaultdError for one that cannot)."""
        self.client = self._locate()
        return self.client

    @contextmanager
    def service(self) -> Iterator[Any]:
        """The daemon found now, else the index: one interface (vaultd.api.service.Reads)."""
        client = self.client or self._locate()
        if client is not None:
            from vaultd.api.client import RemoteService

            yield RemoteService(client)
        else:
            with self._local() as local:
                yield local

    @contextmanager
    def _local(self) -> Iterator[Any]:
        """The index for one call; or the daemon, when one came up while its lock was
        waited for."""
        if self._config is None:
            raise VaultdError(f"no vaultd daemon answers; {self._fix}")
        from vaultd.api.client import Client, RemoteService

        with self._one_at_a_time, ExitStack() as stack:
            found = index_or_daemon(stack, self._config, self._holder, self._locate)
            if isinstance(found, Client):
                self.client = found
                yield RemoteService(found)
            else:
                # Only here: the index's service is of no use to a daemon's answer.
                from vaultd.api.local import LocalService

                yield LocalService(found)

    def call(self, operation: str, request: Any) -> Any:
        """`Service.<operation>(request)` of the daemon, or of the index once it is gone (a
        search's `wait_for` not waited on then, and its answer saying so)."""
        from vaultd.api.client import RemoteService

        client = self.client or self._locate()
        if client is not None:
            try:
                answer = getattr(RemoteService(client), operation)(request)
            except _ANSWERED:
                raise
            except VaultdError as exc:
                if client.reachable():
                    raise VaultdError(
                        f"the vaultd daemon on {client.path} is running but did not answer "
                        f"this request ({exc})"
                    ) from exc
                self.client = None  # gone: the index answers until a daemon is back
                if self._config is None:
                    raise VaultdError(
                        f"the vaultd daemon stopped answering on {client.path} ({exc}); {self._fix}"
                    ) from exc
            else:
                self.client = client
                return answer
        with self._local() as local:
            answer = getattr(local, operation)(request)
            if getattr(request, "wait_for", None) is not None and not isinstance(
                local, RemoteService
            ):
                # Nothing indexes without a daemon: the wait could never end.
                answer = answer.model_copy(update={"not_waited": "no_daemon"})
            return answer


def load(config_file: Path | None, vault: Path | None) -> Any:
    from vaultd.config import load_config
    from vaultd.logs import configure

    config = load_config(config_file, vault=vault, env=os.environ)
    configure(config.log)
    return config
