"""Every check of `vaultd doctor`, registered in one list in the order the report gives them,
and `diagnose`, which runs them.

The configuration is checked first: every other check reads it, so when it does not load the
rest are reported not checked. The others run in the list's order, each given what the checks
before it found (`Facts`: the model's id, the vault's folder count, the daemon's watcher).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vaultd.config import Config
from vaultd.doctor.config import check_config
from vaultd.doctor.inotify import check_inotify, read_inotify_limits
from vaultd.doctor.languages import check_languages
from vaultd.doctor.lock import index_checks
from vaultd.doctor.model import check_model
from vaultd.doctor.privacy import check_privacy
from vaultd.doctor.readers import check_readers
from vaultd.doctor.report import Check, Report, not_checked
from vaultd.doctor.store import check_store_location
from vaultd.doctor.vault import check_vault


@dataclass(slots=True)
class Facts:
    """What the checks found that later checks need; each step fills in its own."""

    config: Config
    env: Mapping[str, str]
    #: The model the index uses (from the model check), when known.
    model_id: str | None = None
    #: The vault's folders, each an inotify watch (from the vault check), when it was walked.
    folders: int | None = None
    #: The running daemon's watcher status (from the index's checks), when one answered.
    watch: Mapping[str, Any] | None = None

    @property
    def located(self) -> tuple[Path, Path] | None:
        """(the vault, its data directory), when a vault is configured."""
        root, data_dir = self.config.vault.path, self.config.store.path
        return None if root is None or data_dir is None else (root, data_dir)


@dataclass(frozen=True, slots=True)
class Registered:
    """One entry of the list: the checks it reports, by name and in order, and the function
    that makes them."""

    names: tuple[str, ...]
    run: Callable[[Facts], tuple[Check, ...]]


def _model(facts: Facts) -> tuple[Check, ...]:
    check, facts.model_id = check_model(facts.config, facts.env)
    return (check,)


def _languages(facts: Facts) -> tuple[Check, ...]:
    return (check_languages(facts.config, facts.model_id),)


def _vault(facts: Facts) -> tuple[Check, ...]:
    check, facts.folders = check_vault(facts.config)
    return (check,)


def _readers(facts: Facts) -> tuple[Check, ...]:
    return (check_readers(facts.config),)


def _no_vault(*names: str) -> tuple[Check, ...]:
    return tuple(not_checked(name, "no vault configured", "vault") for name in names)


def _store(facts: Facts) -> tuple[Check, ...]:
    located = facts.located
    if located is None:
        return _no_vault("store")
    root, data_dir = located
    return (check_store_location(data_dir, root),)


def _privacy(facts: Facts) -> tuple[Check, ...]:
    located = facts.located
    if located is None:
        return _no_vault("privacy")
    return (check_privacy(located[1], facts.config.log.file),)


_INDEX = ("lock", "socket", "manifest", "chroma")


def _index(facts: Facts) -> tuple[Check, ...]:
    located = facts.located
    if located is None:
        return _no_vault(*_INDEX)
    root, data_dir = located
    found, facts.watch = index_checks(facts.config, facts.env, root, data_dir, facts.model_id)
    return tuple(found[name] for name in _INDEX)


def _inotify(facts: Facts) -> tuple[Check, ...]:
    check = check_inotify(
        read_inotify_limits(),
        facts.folders,
        linux=sys.platform.startswith("linux"),
        backend=facts.config.watch.backend,
        daemon_watch=facts.watch,
    )
    return (check,)


#: Every check after the configuration's, in the order they run and are reported.
CHECKS: tuple[Registered, ...] = (
    Registered(("model",), _model),
    Registered(("languages",), _languages),
    Registered(("vault",), _vault),
    Registered(("readers",), _readers),
    Registered(("store",), _store),
    Registered(("privacy",), _privacy),
    Registered(_INDEX, _index),
    Registered(("inotify",), _inotify),
)

#: The names of the checks, as the report lists them.
ORDER: tuple[str, ...] = ("config", *(name for entry in CHECKS for name in entry.names))


def diagnose(config_file: Path | None, vault: Path | None, env: Mapping[str, str]) -> Report:
    """Run every check; the report lists them in ORDER. Never raises for what it finds."""
    first, loaded = check_config(config_file, vault, env)
    if loaded is None:
        rest = [not_checked(name, "the configuration did not load", "config") for name in ORDER[1:]]
        return Report((first, *rest))
    facts = Facts(loaded, env)
    found = [first]
    for entry in CHECKS:
        found += entry.run(facts)
    return Report(tuple(found))
