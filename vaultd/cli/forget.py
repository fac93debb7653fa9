"""`vaultd forget`: remove a vault's data directory, or the derived models' cache.

What goes is only ever vaultd's own: the data directory must hold vaultd's files and nothing
else (a `[store] path` pointed at a folder of documents by mistake is refused, not emptied),
must not be the vault or inside it, nor hold it; the lock is taken first, so a running daemon
keeps its index. The vault itself is never touched. A later `vaultd index` or `vaultd run`
builds the index again from the notes.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import click

from vaultd.cli.common import config_option, handle_errors
from vaultd.config import load_config
from vaultd.errors import LockedError, SetupError
from vaultd.layout import CHROMA, DAEMON_RECORD, LOCK, MANIFEST

#: What a data directory holds: vaultd's files (with their temporaries and the WAL's), the
#: Chroma store and the copies of it moved aside, the daemon's record. Nothing else is ours.
_OURS = ("vaultd", CHROMA, DAEMON_RECORD)


def _size(path: Path) -> int:
    if not path.is_dir() or path.is_symlink():
        return path.lstat().st_size
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += (Path(root) / name).lstat().st_size
            except OSError:
                continue
    return total


def _megabytes(size: int) -> str:
    return f"{size / 1048576:.1f} MB"


def data_dir_to_forget(
    config_file: Path | None, vault: Path | None, env: Mapping[str, str]
) -> tuple[Path, Path | None]:
    """The data directory of the configured vault (which need not exist any more), and the
    vault; raises SetupError when it is not vaultd's alone to remove."""
    config = load_config(config_file, vault=vault, env=env)
    data_dir = config.store.path
    if data_dir is None:
        raise SetupError("no vault configured: pass --vault DIR (or --config FILE)")
    data_dir = data_dir.resolve()
    notes = config.vault.path.resolve() if config.vault.path is not None else None
    if notes is not None and (data_dir.is_relative_to(notes) or notes.is_relative_to(data_dir)):
        raise SetupError(f"{data_dir} is or holds the vault {notes}: nothing removed")
    if not data_dir.exists():
        raise SetupError(f"nothing to forget: {data_dir} does not exist")
    if data_dir.is_symlink() or not data_dir.is_dir():
        raise SetupError(f"{data_dir} is not a folder vaultd made: nothing removed")
    entries = sorted(p.name for p in data_dir.iterdir())
    foreign = [name for name in entries if not name.lstrip(".").startswith(_OURS)]
    if foreign or not {MANIFEST, LOCK, CHROMA} & set(entries):
        listed = ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "")
        why = f"it holds files that are not vaultd's: {listed}" if foreign else "it is empty"
        raise SetupError(
            f"{data_dir} does not look like a vaultd data directory ({why}); nothing removed"
        )
    return data_dir, notes


def remove_data_dir(data_dir: Path) -> None:
    """Remove it under its lock: a daemon or `vaultd index` that holds it keeps it."""
    from vaultd.storage.lock import READERS, DataDirLock, Holder, LockHolder

    lock = DataDirLock(data_dir, Holder.FORGET)
    try:
        lock.acquire()
    except LockedError as exc:
        if exc.holder in READERS:
            raise  # it says to try again in a moment
        # Not the lock's own advice, which offers querying through the socket instead.
        who = LockHolder(exc.pid, Holder.named(exc.holder)).describe()
        raise LockedError(
            f"{who} is using {data_dir}; stop it first (`systemctl --user stop vaultd`, or "
            "Ctrl-C in its terminal), then forget",
            pid=exc.pid,
            holder=exc.holder,
        ) from None
    try:
        shutil.rmtree(data_dir)
    finally:
        lock.release()


def models_to_forget(env: Mapping[str, str]) -> Path:
    from vaultd.embedding.derive import cache_dir

    cache = cache_dir(env)
    if not cache.is_dir():
        raise SetupError(f"nothing to forget: {cache} does not exist")
    return cache


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    try:
        agreed = click.confirm(question, default=False, err=True)
    except click.Abort:
        agreed = False
    if not agreed:
        raise SetupError("nothing removed (pass --yes to remove without asking)")


@click.command("forget")
@click.option("--yes", "-y", "yes", is_flag=True, help="Remove without asking.")
@click.option(
    "--models",
    is_flag=True,
    help="Remove the cache of derived models instead ($XDG_CACHE_HOME/vaultd/models): "
    "they are built again at first use, or by `vaultd model build`.",
)
@config_option
@click.option(
    "--vault",
    type=click.Path(path_type=Path, file_okay=False),
    help="The vault whose data to remove (overrides [vault] path; it need not exist any more).",
)
@handle_errors
def forget(yes: bool, models: bool, config_file: Path | None, vault: Path | None) -> None:
    """Remove a vault's index (its data directory), never the vault's notes.

    Asks first, unless --yes. Refused while a vaultd process uses the index (exit 75: stop
    it first), and for a folder that holds anything but vaultd's files. The service file and
    the config stay (`vaultd service uninstall` removes the service file); a Chroma server's
    collection ([store] url) stays on the server. `vaultd index` or `vaultd run` builds the
    index again.

    \b
    Typical use:
      vaultd forget --vault ~/Notes
      vaultd forget --models --yes
    """
    if models:
        cache = models_to_forget(os.environ)
        _confirm(f"remove the derived models in {cache} ({_megabytes(_size(cache))})?", yes)
        shutil.rmtree(cache)
        click.echo(f"removed {cache}")
        return
    data_dir, notes = data_dir_to_forget(config_file, vault, os.environ)
    of = f" of {notes}" if notes is not None else ""
    _confirm(f"remove the index{of} in {data_dir} ({_megabytes(_size(data_dir))})?", yes)
    remove_data_dir(data_dir)
    click.echo(f"removed {data_dir}; the vault{of} is untouched")
