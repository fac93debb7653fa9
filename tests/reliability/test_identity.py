"""Health that tells the truth when the things under the daemon are swapped (issue 35, findings
5 and 7a).

The vault root and `vaultd.db` are checked by identity (device, inode; the root also for being
a symlink) on every tick of the main loop. On main before this, health said "ok" throughout:

- a vault root replaced by a symlink: every note was opened through it and refused (no link is
  followed), so every edit was left out, even by a full reindex;
- `vaultd.db` deleted or replaced while running: the connections wrote on into the file they
  held, and the next start found nothing, or SQLite applied the old file's log to the new one;
- a file whose name is not UTF-8, created while running: reported only by the next full walk.

Each case runs the real daemon on real files with the real watcher, and ends by comparing its
index record by record with a fresh one.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PosixPath
from typing import Any, cast

import pytest

from harness.convergence import assert_converged
from harness.daemon import PATIENCE, RunningDaemon, running, short_socket_dir, start, write_config
from tests.small_vault import write_vault
from vaultd.config import load_config
from vaultd.daemon.lifecycle import Daemon
from vaultd.daemon.state import State
from vaultd.daemon.watching import Watching
from vaultd.daemon.worker import Worker
from vaultd.errors import ManifestLostError
from vaultd.index.open import open_index
from vaultd.index.status import IdentityCheck
from vaultd.pipeline.watch import Watcher

pytestmark = pytest.mark.slow


def note(title: str, body: str) -> str:
    return f"# {title}\n\n{body}\n"


def seed(vault: Path) -> None:
    (vault / "Animals").mkdir(parents=True)
    (vault / "Animals" / "Otter.md").write_text(note("Otter", "Otters hold hands asleep."))
    (vault / "Garden.md").write_text(note("Garden", "Tomatoes want the south wall."))


def status(daemon: RunningDaemon) -> dict[str, Any]:
    result: dict[str, Any] = daemon.request("GET", "/v1/status")
    return result


def hits(daemon: RunningDaemon, query: str) -> set[str]:
    return {h["path"] for h in daemon.search(query, k=50, mode="keyword")}


def eventually(check: Callable[[], bool], what: str, timeout: float = PATIENCE) -> float:
    """Wait for `check`; how long it took. Polls: no fixed sleep decides anything."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            pytest.fail(f"not within {timeout} s: {what}")
        time.sleep(0.05)
    return time.monotonic() - started


def cli_status(daemon: RunningDaemon) -> subprocess.CompletedProcess[str]:
    """`vaultd status --json`, the real command, as a user would run it beside the daemon."""
    command = [sys.executable, "-m", "vaultd", "status", "--json", "--config", str(daemon.config)]
    return subprocess.run(
        command, capture_output=True, text=True, env=daemon.env, timeout=PATIENCE, check=False
    )


def log_events(daemon: RunningDaemon) -> list[dict[str, Any]]:
    events = []
    for line in daemon.log_text().splitlines():
        if line.startswith("{"):
            events.append(json.loads(line))
    return events


# -- the vault root ----------------------------------------------------------------------------


def test_a_vault_root_replaced_by_a_symlink_degrades_and_recovers_when_put_back(
    tmp_path: Path,
) -> None:
    vault = tmp_path / "vault"
    seed(vault)
    real = tmp_path / "real"
    with running(vault, tmp_path) as daemon:
        vault.rename(real)
        vault.symlink_to(real, target_is_directory=True)

        def root_check() -> dict[str, Any]:
            found: dict[str, Any] = status(daemon)["identity"]["vault_root"]
            return found

        eventually(lambda: root_check()["state"] == "symlink", "the link seen for what it is")
        now = status(daemon)
        assert now["status"] == "degraded"
        assert "symlink" in now["reasons"]["vault"] and str(real) in now["reasons"]["vault"]
        assert now["identity"]["vault_root"]["expected"] != now["identity"]["vault_root"]["found"]
        # `vaultd status` names the daemon's state, not a daemon "of another vault": the
        # configured path now resolves to the link's target, whose id the daemon does not carry.
        shown = cli_status(daemon)
        assert shown.returncode == 1, shown.stderr
        assert json.loads(shown.stdout)["status"] == "degraded"
        # Written through the link meanwhile: not indexed now, and not lost.
        (real / "Heron.md").write_text(note("Heron", "Herons stand in shallow water."))
        # Paused, never purged: the index answers from what it had.
        assert hits(daemon, "otters") == {"Animals/Otter.md"}
        assert status(daemon)["identity"]["vault_root"]["state"] == "symlink"

        vault.unlink()
        real.rename(vault)
        eventually(lambda: status(daemon)["status"] == "ok", "healthy once the folder is back")
        assert root_check()["state"] == "ok"
        eventually(lambda: hits(daemon, "herons") == {"Heron.md"}, "the edit made meanwhile")
        # Watched again.
        (vault / "Capybara.md").write_text(note("Capybara", "Capybaras share their pond."))
        eventually(lambda: hits(daemon, "capybaras") == {"Capybara.md"}, "watching again")
        assert_converged(daemon, vault, tmp_path)


class _Watcher:
    def stop(self) -> None:
        pass


@dataclass
class _Worker:
    paused: bool = False


def test_a_failed_root_check_is_published_only_after_the_health_it_implies(
    tmp_path: Path,
) -> None:
    """A status read between the two once showed the "symlink" check beside "ok" (CI, stop
    49): the check is now published after the daemon is degraded by it."""
    real = tmp_path / "real"
    real.mkdir()
    root = tmp_path / "vault"
    root.symlink_to(real, target_is_directory=True)
    published_at_degrade: list[IdentityCheck | None] = []

    class Recording(State):
        def degrade(self, key: str, reason: str) -> None:
            published_at_degrade.append(watching.last)
            super().degrade(key, reason)

    watching = Watching(Recording())
    worker = _Worker()
    watching.check_root(root, cast(Watcher, _Watcher()), cast(Worker, worker))
    assert worker.paused
    assert published_at_degrade == [None]
    assert watching.last is not None and watching.last.state == "symlink"


def test_a_vault_root_replaced_by_another_folder_is_re_armed_and_reconciled(
    tmp_path: Path,
) -> None:
    vault = tmp_path / "vault"
    seed(vault)
    other = tmp_path / "other"
    other.mkdir()
    (other / "Lichen.md").write_text(note("Lichen", "Lichen grows on the north stones."))
    with running(vault, tmp_path) as daemon:
        expected = status(daemon)["identity"]["vault_root"]["found"]
        # Both renames between two checks, as a sync tool swapping in a new tree does.
        vault.rename(tmp_path / "old")
        other.rename(vault)
        eventually(lambda: hits(daemon, "lichen") == {"Lichen.md"}, "the new folder indexed")
        eventually(lambda: hits(daemon, "otters") == set(), "the old folder's notes gone")
        check = status(daemon)["identity"]["vault_root"]
        assert check["state"] == "ok" and check["found"] != expected
        (vault / "Moss.md").write_text(note("Moss", "Moss keeps the stones wet."))
        eventually(lambda: hits(daemon, "moss") == {"Moss.md"}, "the new folder watched")
        assert status(daemon)["status"] == "ok"
        assert_converged(daemon, vault, tmp_path)


@dataclass
class StillWatcher:
    running: bool = True
    starts: int = 0
    mode: str = "native"
    fallback_reason: str = ""

    def alive(self) -> bool:
        return self.running

    def stop(self) -> None:
        self.running = False

    def start(self) -> None:
        self.starts += 1
        self.running = True


@dataclass
class StillWorker:
    paused: bool = False
    full_requests: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def request_full(self) -> None:
        self.full_requests += 1

    def is_alive(self) -> bool:
        return True


def test_a_root_back_is_published_only_with_the_health_it_restores(tmp_path: Path) -> None:
    """While the watch was armed again (seconds on a big vault) status showed the root's "ok"
    check beside the reason that it was missing: the check is now published with the
    recovery, as a failed one is with the degrade."""
    root, parked = tmp_path / "vault", tmp_path / "parked"
    root.mkdir()
    watching = Watching(State())
    watching.state.started()
    shown_while_arming: list[tuple[str | None, str | None]] = []

    class Arming(StillWatcher):
        def start(self) -> None:
            last = watching.last
            vault = watching.state.snapshot()["reasons"].get("vault")
            shown_while_arming.append((None if last is None else last.state, vault))
            super().start()

    watcher, worker = Arming(), StillWorker()
    watching.check_root(root, cast(Watcher, watcher), cast(Worker, worker))
    root.rename(parked)
    watching.check_root(root, cast(Watcher, watcher), cast(Worker, worker))
    assert worker.paused
    parked.rename(root)
    watching.check_root(root, cast(Watcher, watcher), cast(Worker, worker))
    assert not worker.paused and watcher.running and worker.full_requests == 1
    [(state, reason)] = shown_while_arming
    assert state == "missing" and reason is not None and "missing" in reason
    assert watching.last is not None and watching.last.state == "ok"
    assert watching.state.snapshot()["status"] == "ok"


def test_status_never_shows_a_check_or_a_pass_beside_a_health_they_do_not_belong_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Status read the root's check and the pass's progress before the health: the root back
    (its "ok" published, then the health restored) or the pass done (its progress cleared,
    then its name) between those reads answered "ok" beside the "missing" check, or an idle
    daemon with a pass's progress. Here both happen as status reads the health."""
    config = write_vault(tmp_path, {"A.md": "# A\n\nOtters hold hands.\n"})
    with open_index(load_config(config, env={}), env={}) as index:
        daemon = Daemon(load_config(config, env={}), env={})
        watcher = Watcher(index.vault, settle=0.0)
        daemon.index, daemon.watcher = index, watcher
        daemon.worker = worker = Worker(index, watcher, daemon.state)
        daemon.state.started()
        # The root gone, as Watching.check_root publishes it, during a full pass.
        daemon.state.degrade("vault", "the vault root is missing")
        daemon.watching.last = IdentityCheck("missing", "gone", (1, 2), None, time.time())
        daemon.state.indexing = "full reconcile"
        worker.progress("embed", 1, 4)
        health = daemon.state.snapshot
        meanwhile: list[bool] = [True]

        def root_back_and_pass_done_meanwhile() -> dict[str, Any]:
            if meanwhile:
                meanwhile.clear()
                daemon.watching.last = IdentityCheck("ok", None, (1, 2), (1, 2), time.time())
                daemon.state.recover("vault")
                worker.progress.clear()
                daemon.state.indexing = ""
            return health()

        monkeypatch.setattr(daemon.state, "snapshot", root_back_and_pass_done_meanwhile)
        answer = daemon.status()
    assert not meanwhile, "the root came back while status read"
    assert answer.status == "ok" and answer.identity["vault_root"]["state"] == "ok", answer
    assert answer.indexing == "" and answer.progress is None, answer


def test_an_unmounted_vault_showing_an_empty_folder_pauses_instead_of_purging(
    tmp_path: Path,
) -> None:
    """What an unmount leaves: the folder the vault was mounted on, on another device. A test
    cannot mount, so the root's stat answers another device; the folder is real and empty."""
    root = tmp_path / "vault"
    root.mkdir()
    config = write_config(tmp_path / "c.toml", root, tmp_path / "data", short_socket_dir() / "s")
    daemon = Daemon(load_config(config, env={}), env={})
    watcher, worker = StillWatcher(), StillWorker()
    daemon.watcher = cast(Watcher, watcher)
    daemon.worker = cast(Worker, worker)
    daemon.state.started()
    unmounted = [False]

    class Mount(PosixPath):
        def lstat(self) -> os.stat_result:
            info = super().lstat()
            if not unmounted[0]:
                return info
            fields = list(info)
            fields[stat.ST_DEV] += 1
            return os.stat_result(fields)

    mount = Mount(root)
    daemon.watching.check_root(mount, watcher, worker)
    assert not worker.paused and worker.full_requests == 0

    unmounted[0] = True
    daemon.watching.check_root(mount, watcher, worker)
    assert worker.paused and not watcher.running and worker.full_requests == 0
    snapshot = daemon.state.snapshot()
    assert snapshot["status"] == "degraded" and "unmounted" in snapshot["reasons"]["vault"]
    assert daemon.watching.last.state == "unmounted"

    # Mounted again: the vault it was, re-armed and reconciled.
    unmounted[0] = False
    daemon.watching.check_root(mount, watcher, worker)
    assert not worker.paused and watcher.running and worker.full_requests == 1
    assert daemon.state.snapshot()["status"] == "ok"

    # Notes put in the empty folder make it a vault of its own, taken on.
    unmounted[0] = True
    daemon.watching.check_root(mount, watcher, worker)
    assert worker.paused
    (root / "New.md").write_text(note("New", "A vault of its own."))
    daemon.watching.check_root(mount, watcher, worker)
    assert not worker.paused and worker.full_requests == 2
    assert daemon.watching.last.state == "ok"


# -- vaultd.db ---------------------------------------------------------------------------------


def stopped_for(daemon: RunningDaemon, problem: str, since: float) -> float:
    """Wait for the daemon to stop on its own; how long after `since` it said why."""
    code = daemon.process.wait(PATIENCE)
    assert code == ManifestLostError.exit_code == 78, daemon.log_text()
    lost = [
        e
        for e in log_events(daemon)
        if str(e.get("event", "")).startswith("the index's database is lost")
    ]
    assert len(lost) == 1 and lost[0]["problem"] == problem, daemon.log_text()
    assert "vaultd stopped so that nothing more is written" in daemon.log_text()
    return datetime.fromisoformat(lost[0]["timestamp"]).timestamp() - since


def restart(daemon: RunningDaemon, tmp_path: Path) -> RunningDaemon:
    return start(daemon.config, daemon.socket, tmp_path / "restart.log")


def test_vaultd_db_deleted_while_running_stops_with_78_and_the_restart_rebuilds(
    tmp_path: Path,
) -> None:
    vault = tmp_path / "vault"
    seed(vault)
    with running(vault, tmp_path) as daemon:
        manifest = tmp_path / "data" / "vaultd.db"
        deleted = time.time()
        manifest.unlink()
        (vault / "Heron.md").write_text(note("Heron", "Herons stand in shallow water."))
        # Bounded by a tick plus a loaded machine; one second of the log's resolution.
        assert stopped_for(daemon, "missing", deleted) < 30
    again = restart(daemon, tmp_path)
    try:
        assert hits(again, "herons") == {"Heron.md"}
        assert hits(again, "otters") == {"Animals/Otter.md"}
        assert status(again)["identity"]["manifest"]["state"] == "ok"
        assert_converged(again, vault, tmp_path)
    finally:
        again.stop()


def test_vaultd_db_replaced_by_another_file_stops_and_that_file_is_left_intact(
    tmp_path: Path,
) -> None:
    """A backup put back while running: the daemon stops rather than write on into the file it
    holds, its log is not applied to the backup, and the restart takes the backup up from
    there and converges."""
    vault = tmp_path / "vault"
    seed(vault)
    manifest = tmp_path / "data" / "vaultd.db"
    backup = tmp_path / "backup.db"
    with running(vault, tmp_path) as daemon:
        with (
            sqlite3.connect(f"{manifest.as_uri()}?mode=ro", uri=True) as live,
            sqlite3.connect(backup) as copy,
        ):
            live.backup(copy)
        live.close()
        copy.close()
        (vault / "Heron.md").write_text(note("Heron", "Herons stand in shallow water."))
        eventually(lambda: hits(daemon, "herons") == {"Heron.md"}, "a note the backup lacks")
        (vault / "Garden.md").unlink()
        eventually(lambda: hits(daemon, "tomatoes") == set(), "a note the backup has")
        replaced = time.time()
        os.replace(backup, manifest)
        assert stopped_for(daemon, "replaced", replaced) < 30
    # The backup as it was: nothing of the lost file's log went into it.
    with sqlite3.connect(f"{manifest.as_uri()}?mode=ro", uri=True) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        paths = {row[0] for row in db.execute("SELECT path FROM notes")}
    db.close()
    assert paths == {"Animals/Otter.md", "Garden.md"}
    again = restart(daemon, tmp_path)
    try:
        assert hits(again, "herons") == {"Heron.md"} and hits(again, "tomatoes") == set()
        assert_converged(again, vault, tmp_path)
    finally:
        again.stop()


# -- names that are not UTF-8 ------------------------------------------------------------------


def test_a_name_that_is_not_utf8_created_live_is_reported_at_once(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    seed(vault)
    with running(vault, tmp_path) as daemon:
        before = status(daemon)
        assert before["skipped"] == []
        latin = vault / os.fsdecode(b"caf\xe9.md")
        latin.write_bytes(note("Cafe", "Un caf\xe9 au lait.").encode("latin-1"))
        folder = vault / os.fsdecode(b"r\xe9sum\xe9s")
        folder.mkdir()
        (folder / "Inside.md").write_text(note("Inside", "Inside a folder named in Latin-1."))
        # The rules come first, as in the walk: neither is a note, named well or not.
        (vault / os.fsdecode(b"caf\xe9.txt")).write_bytes(b"not a note")
        (vault / os.fsdecode(b".caf\xe9.md")).write_bytes(b"# hidden\n")
        reason = "file name is not valid UTF-8"
        wanted = [
            {"path": "caf\\xe9.md", "reason": reason},
            {"path": "r\\xe9sum\\xe9s/", "reason": reason},
        ]
        eventually(lambda: sorted(status(daemon)["skipped"], key=str) == wanted, "both in status")
        # By the watcher's path: no full pass ran meanwhile.
        assert status(daemon)["last_reconcile_at"] == before["last_reconcile_at"]
        reported = {e["path"] for e in log_events(daemon) if e.get("event") == "not indexed"}
        assert reported == {"caf\\xe9.md", "r\\xe9sum\\xe9s/"}
        assert status(daemon)["status"] == "ok"

        latin.unlink()
        eventually(lambda: status(daemon)["skipped"] == wanted[1:], "the file gone, its report")
        assert_converged(daemon, vault, tmp_path)
