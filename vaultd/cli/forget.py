"""`vaultd forget`: remove a vault's data directory, or the derived models' cache.

What goes is only ever vaultd's own. No link is followed, at any level: a data directory or a
cache that is a link is refused, not the folder it leads to emptied. Every entry must be one
vaultd makes, by name and by type (`vaultd.layout.made_by_vaultd`, `derive.removable`): a
`[store] path` pointed at a folder of documents by mistake is refused, and so is a folder that
vaultd made (it holds `vaultd.dir`) once something else was put in it. A data directory made
before that marker existed is taken when every entry is vaultd's and it holds the manifest,
the lock or the store. It must not be the vault or inside it, nor hold it. Whatever a vaultd
process uses is refused: the data directory's lock is taken first, and the models' cache is
held by every process that may load a model from it. The vault itself is never touched. A
later `vaultd index` or `vaultd run` builds the index again from the notes.
"""

from __future__ import annotations

import os
import shutil
import stat
import tomllib
from collections.abc import Mapping
from pathlib import Path

import click

from vaultd.cli.common import config_option, handle_errors
from vaultd.config import config_path, load_config
from vaultd.errors import DeclinedError, LockedError, SetupError
from vaultd.layout import CHROMA, LOCK, MANIFEST, MARKER, made_by_vaultd, made_folder


def _megabytes(size: int) -> str:
    return f"{size / 1048576:.1f} MB"


def _entries(data_dir: Path) -> dict[str, os.stat_result]:
    """The data directory's entries and their `lstat`; SetupError unless each is vaultd's."""
    with os.scandir(data_dir) as listing:
        entries = {entry.name: entry.stat(follow_symlinks=False) for entry in listing}
    foreign = sorted(
        name for name, info in entries.items() if not made_by_vaultd(name, info.st_mode)
    )
    if foreign or not ({MARKER, MANIFEST, LOCK, CHROMA} & set(entries)):
        listed = ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "")
        why = f"it holds files that are not vaultd's: {listed}" if foreign else "it is empty"
        raise SetupError(
            f"{data_dir} does not look like a vaultd data directory ({why}); nothing removed"
        )
    return entries


def _size(data_dir: Path, entries: Mapping[str, os.stat_result]) -> int:
    total = 0
    for name, info in entries.items():
        if not stat.S_ISDIR(info.st_mode):
            total += info.st_size
            continue
        for root, _, files in os.walk(data_dir / name):  # links inside are not followed
            for file in files:
                try:
                    total += (Path(root) / file).lstat().st_size
                except OSError:
                    continue
    return total


def _as_written(config_file: Path | None, env: Mapping[str, str]) -> Path | None:
    """`[store] path` as the config file writes it (`~` expanded, a relative path taken from
    the file's folder), links not resolved; None when the file sets none (the default data
    directory, which the config does not resolve). The file has been read and checked."""
    source = config_path(config_file, env)
    if source is None:
        return None
    with source.open("rb") as handle:
        store = tomllib.load(handle).get("store", {})
    written = store.get("path") if isinstance(store, dict) else None
    if not isinstance(written, str):
        return None
    if written == "~" or written.startswith("~/"):
        written = str(Path(env.get("HOME") or Path.home()) / written[2:])
    return Path(os.path.abspath(source.parent / written))


def data_dir_to_forget(
    config_file: Path | None, vault: Path | None, env: Mapping[str, str]
) -> tuple[Path, Path | None, int]:
    """The data directory of the configured vault (which need not exist any more), the vault,
    and the bytes it holds; raises SetupError when it is not vaultd's alone to remove."""
    config = load_config(config_file, vault=vault, env=env)
    if config.store.path is None:
        raise SetupError("no vault configured: pass --vault DIR (or --config FILE)")
    # As written, not resolved as the config resolves it: a link there is refused below.
    data_dir = _as_written(config_file, env) or config.store.path
    notes = config.vault.path.resolve() if config.vault.path is not None else None
    real = data_dir.resolve()
    if notes is not None and (real.is_relative_to(notes) or notes.is_relative_to(real)):
        raise SetupError(f"{data_dir} is or holds the vault {notes}: nothing removed")
    made_folder(data_dir, "the folder")
    entries = _entries(data_dir)
    return data_dir, notes, _size(data_dir, entries)


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
        # Looked at again under the lock; each entry goes by its own kind, the lock last.
        entries = _entries(data_dir)
        for name, info in sorted(entries.items()):
            if name == LOCK:
                continue
            if stat.S_ISDIR(info.st_mode):
                shutil.rmtree(data_dir / name)  # removes links inside, never follows them
            else:
                (data_dir / name).unlink()
        (data_dir / LOCK).unlink(missing_ok=True)
        data_dir.rmdir()
    finally:
        lock.release()


def models_to_forget(env: Mapping[str, str]) -> tuple[Path, int]:
    """The derived models' cache and the bytes it holds; SetupError unless vaultd's alone."""
    from vaultd.embedding.derive import cache_dir, removable

    cache = cache_dir(env)
    return cache, removable(cache)


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    try:
        agreed = click.confirm(question, default=False, err=True)
    except click.Abort:
        agreed = False
    if not agreed:
        raise DeclinedError("nothing removed (pass --yes to remove without asking)")


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

    Asks first, unless --yes. Refused while a vaultd process uses the index or the models
    (exit 75: stop it first), and for a link or a folder that holds anything but vaultd's
    files. The service file and the config stay (`vaultd service uninstall` removes the
    service file); a Chroma server's collection ([store] url) stays on the server. `vaultd
    index` or `vaultd run` builds the index again.

    \b
    Typical use:
      vaultd forget --vault ~/Notes
      vaultd forget --models --yes
    """
    if models:
        from vaultd.embedding.derive import remove_cache

        cache, size = models_to_forget(os.environ)
        _confirm(f"remove the derived models in {cache} ({_megabytes(size)})?", yes)
        remove_cache(cache)
        click.echo(f"removed {cache}")
        return
    data_dir, notes, size = data_dir_to_forget(config_file, vault, os.environ)
    of = f" of {notes}" if notes is not None else ""
    _confirm(f"remove the index{of} in {data_dir} ({_megabytes(size)})?", yes)
    remove_data_dir(data_dir)
    click.echo(f"removed {data_dir}; the vault{of} is untouched")
