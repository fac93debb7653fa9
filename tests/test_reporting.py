"""Nothing silent: where vaultd promises a report, it reports.

- A file that is no note vaultd can index is logged, listed in `status` and `doctor`, from the
  watcher's path as from a full pass, and remembered across restarts.
- A command that only reads refuses a vault that was never indexed, and creates nothing.
- `vaultd status` says when bulk work waits for a busy machine.
- Notes merely in hand when the process was killed are not reported as failed.

Real daemons (`vaultd run` in a subprocess), the real CLI in a subprocess, real files.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from harness.daemon import RunningDaemon, fault_env, short_socket_dir, start, wait_until
from vaultd.cli.commands import main
from vaultd.faults import CRASH_ON, CRASH_SIGNAL
from vaultd.layout import MANIFEST as FILE_NAME

pytestmark = pytest.mark.slow


def note(title: str, body: str) -> str:
    return f"# {title}\n\n{body}\n"


def config_file(
    workdir: Path, vault: Path, *, vault_keys: str = "", extra: str = "", socket: Path | None = None
) -> tuple[Path, Path]:
    """A config for `vault` with its data in `workdir/data`; returns (config, socket)."""
    socket = socket or short_socket_dir() / "vaultd.sock"
    path = workdir / "vaultd.toml"
    path.write_text(
        f'[vault]\npath = "{vault}"\n{vault_keys}\n\n[store]\npath = "{workdir / "data"}"\n\n'
        f'[server]\nsocket = "{socket}"\n\n[watch]\ndebounce = "200ms"\n\n'
        f'[log]\nlevel = "info"\nformat = "json"\n{extra}',
        encoding="utf-8",
    )
    return path, socket


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vaultd", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def status(daemon: RunningDaemon) -> dict[str, Any]:
    result: dict[str, Any] = daemon.request("GET", "/v1/status")
    return result


def events(daemon: RunningDaemon, name: str) -> list[dict[str, Any]]:
    found = []
    for line in daemon.log_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") == name:
            found.append(record)
    return found


@pytest.fixture
def daemons() -> Iterator[list[RunningDaemon]]:
    """Daemons a test starts; any still running at the end is stopped."""
    started: list[RunningDaemon] = []
    yield started
    for daemon in started:
        if daemon.process.poll() is None:
            daemon.stop()


# -- left out --------------------------------------------------------------------------------------


def test_a_too_big_note_added_while_the_daemon_runs_is_in_status_within_the_debounce_window(
    tmp_path: Path, daemons: list[RunningDaemon]
) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "small.md").write_text(note("Small", "A wren sings."))
    config, socket = config_file(  # 10,485 bytes; full passes not paced by a busy machine
        tmp_path, vault, vault_keys="max_file_mb = 0.01", extra="\n[embedding]\nyield_above = 1.0\n"
    )
    log = tmp_path / "vaultd.log"
    daemon = start(config, socket, log)
    daemons.append(daemon)
    assert status(daemon)["left_out"] == []

    (vault / "big.md").write_text(note("Big", "A heron wades. " * 1000))  # 15 KB

    def listed() -> list[dict[str, Any]]:
        return [e for e in status(daemon)["left_out"] if e["path"] == "big.md"]

    wait_until(lambda: bool(listed()), "the too-big note is in status")
    [entry] = listed()
    assert entry["kind"] == "too_big"
    assert entry["reason"].startswith("larger than the 0.01 MB limit")
    assert status(daemon)["failed"] == []
    [logged] = events(daemon, "note left out")
    assert (logged["path"], logged["kind"], logged["level"]) == ("big.md", "too_big", "warning")
    assert logged["reason"] == entry["reason"]

    # The human status lists it, and exits 0: a left-out file is no failure.
    shown = cli("status", "--config", str(config))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "1 left out" in shown.stdout
    assert f"left out: big.md: {entry['reason']}" in shown.stdout
    # Doctor names it, through the daemon.
    checked = cli("doctor", "--json", "--config", str(config))
    manifest = next(c for c in json.loads(checked.stdout)["checks"] if c["name"] == "manifest")
    assert "1 left out: big.md: larger than" in manifest["message"], manifest

    # Full passes meet it again: listed still, logged no more.
    daemon.request("POST", "/v1/reindex", {})
    daemon.wait_idle()
    daemon.request("POST", "/v1/reindex", {})
    daemon.wait_idle()
    assert len(listed()) == 1 and len(events(daemon, "note left out")) == 1

    # Across a restart: the manifest remembers it, so it is listed and not logged again.
    assert daemon.stop() == 0
    daemon = start(config, socket, log)
    daemons.append(daemon)
    assert len(listed()) == 1 and len(events(daemon, "note left out")) == 1
    assert daemon.stop() == 0
    offline = cli("status", "--json", "--config", str(config))
    assert offline.returncode == 0, offline.stderr
    assert [e["path"] for e in json.loads(offline.stdout)["left_out"]] == ["big.md"]
    daemon = start(config, socket, log)
    daemons.append(daemon)

    # Fixed: off the list, and indexed. Then a binary note, deleted again: on and off.
    (vault / "big.md").write_text(note("Big", "A heron wades, briefly."))
    daemon.search("heron", wait_for="big.md", timeout=30)
    wait_until(lambda: not listed(), "the fixed note leaves the list")
    assert {h["path"] for h in daemon.search("heron", mode="keyword")} == {"big.md"}
    (vault / "blob.md").write_bytes(b"\x00\x01binary\x00")
    wait_until(
        lambda: [e["kind"] for e in status(daemon)["left_out"]] == ["binary"], "the binary note"
    )
    (vault / "blob.md").unlink()
    wait_until(lambda: status(daemon)["left_out"] == [], "the deleted binary note leaves")


# -- a vault that was never indexed ------------------------------------------------------------


def test_read_only_commands_on_a_never_indexed_vault_say_so_and_create_nothing(
    tmp_path: Path,
) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "garden.md").write_text(note("Garden", "Water the tomatoes at dawn."))
    env = {
        "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
        "XDG_RUNTIME_DIR": str(short_socket_dir()),
        "VAULTD_CONFIG": "",
    }
    data = tmp_path / "data"
    config, _ = config_file(tmp_path, vault)

    searched = cli("search", "tomatoes", "--config", str(config), env=env)
    assert searched.returncode == 1, searched.stdout + searched.stderr
    assert "no hits" not in searched.stdout
    assert "never indexed" in searched.stderr
    # The commands suggested carry the --config given (vaultd.hints).
    assert f"`vaultd index --config {config}`" in searched.stderr, searched.stderr
    assert f"`vaultd run --config {config}`" in searched.stderr, searched.stderr

    shown = cli("status", "--config", str(config), env=env)
    assert shown.returncode == 1, shown.stdout + shown.stderr
    assert "never indexed" in shown.stdout and f"`vaultd index --config {config}`" in shown.stderr
    as_json = cli("status", "--json", "--config", str(config), env=env)
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["status"] == "never_indexed"

    exported = cli("export", "--config", str(config), env=env)
    assert exported.returncode == 1 and exported.stdout == ""
    assert "never indexed" in exported.stderr
    checked = cli("doctor", "--json", "--config", str(config), env=env)
    manifest = next(c for c in json.loads(checked.stdout)["checks"] if c["name"] == "manifest")
    assert manifest["status"] == "warn" and "no index yet" in manifest["message"]
    # The default place (--vault, no [store] path) stays untouched too.
    by_vault = cli("search", "tomatoes", "--vault", str(vault), env=env)
    assert by_vault.returncode == 1 and "never indexed" in by_vault.stderr

    assert not data.exists()
    assert not (tmp_path / "xdg-data").exists()

    indexed = cli("index", "-q", "--config", str(config), env=env)
    assert indexed.returncode == 0, indexed.stderr
    found = cli("search", "tomatoes", "--json", "--config", str(config), env=env)
    assert found.returncode == 0, found.stderr
    assert [h["path"] for h in json.loads(found.stdout)["hits"]] == ["garden.md"]
    assert cli("status", "--config", str(config), env=env).returncode == 0


# -- a busy machine ----------------------------------------------------------------------------

#: The daemon's governor reads the machine through `CpuMeter.others`; this makes it read
#: "others use 85% of all cores" while the flag file exists.
BUSY_METER = """
import os
import vaultd.daemon.governor

def _others(self):
    return 0.85 if os.path.exists(os.environ["VAULTD_TEST_BUSY_FLAG"]) else 0.0

vaultd.daemon.governor.CpuMeter.others = _others
"""


def test_status_says_when_bulk_indexing_waits_for_a_busy_machine(
    tmp_path: Path, daemons: list[RunningDaemon]
) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    for i in range(300):
        (vault / f"note{i:03}.md").write_text(note(f"Note {i}", f"Words about topic {i}. " * 20))
    flag = tmp_path / "busy"
    flag.touch()
    env = fault_env(tmp_path, BUSY_METER, VAULTD_TEST_BUSY_FLAG=str(flag))
    config, socket = config_file(tmp_path, vault)
    daemon = start(config, socket, tmp_path / "vaultd.log", env=env, wait_ready=False)
    daemons.append(daemon)

    def governor() -> dict[str, Any]:
        return dict(status(daemon)["governor"])

    wait_until(lambda: governor()["waiting_for_busy_machine"] is True, "bulk work waits")
    pacing = governor()
    assert pacing["others_share"] == pytest.approx(0.85)
    assert pacing["busy_since"] is not None and pacing["busy_since"] > 0
    shown = cli("status", "--config", str(config))
    assert (
        "slowed:   bulk indexing slows down while the machine is busy (others use 85% of the "
        "CPU), to no less than 25% of the time" in shown.stdout
    ), shown.stdout
    # An edit is no bulk work: served while the pass waits.
    (vault / "fresh.md").write_text(note("Fresh", "The word quokkaberry."))
    wait_until(
        lambda: bool(daemon.search("quokkaberry", k=1, mode="keyword")), "the edit is served"
    )
    assert governor()["waiting_for_busy_machine"] is True

    flag.unlink()
    daemon.wait_idle(timeout=300)
    assert governor()["waiting_for_busy_machine"] is False
    assert governor()["busy_since"] is None
    assert status(daemon)["notes"] == 301
    assert "slowed:" not in cli("status", "--config", str(config)).stdout


# -- crash suspects ----------------------------------------------------------------------------


def test_notes_in_flight_at_a_kill_9_are_not_reported_as_failed(
    tmp_path: Path, daemons: list[RunningDaemon]
) -> None:
    """The fault hook ends the process with SIGKILL while it parses the note holding the
    marker, with the notes before it in the batch read and in hand: exactly a kill -9 at that
    moment. The next start runs without the hook: nothing is wrong with any note, and status
    never says otherwise, not even while the suspects wait for their turn at the end."""
    vault = tmp_path / "vault"
    vault.mkdir()
    first = [f"a{i}.md" for i in range(5)]
    rest = [f"b{i:03}.md" for i in range(300)]
    for name in first + rest:
        marker = " qqkillqq" if name == first[-1] else ""
        (vault / name).write_text(note(name, f"A note called {name} about a lynx{marker}."))
    # Not paced: the status commands this test runs would otherwise hold the pass back.
    config, socket = config_file(tmp_path, vault, extra="\n[embedding]\nyield_above = 1.0\n")
    log = tmp_path / "vaultd.log"
    with pytest.raises(RuntimeError, match=f"exited with {-CRASH_SIGNAL}"):
        start(config, socket, log, env={CRASH_ON: "qqkillqq"})
    database = tmp_path / "data" / FILE_NAME

    def rows(table: str) -> list[str]:
        with sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True) as db:
            return [r[0] for r in db.execute(f"SELECT path FROM {table} ORDER BY path")]

    # Several notes in hand when it died: those read before the marker's, and (a pass this
    # big parses in worker processes) the rest of their group, marked in flight together.
    held = rows("in_flight")
    assert set(first) <= set(held) and len(held) < len(first + rest), held

    daemon = start(config, socket, log, wait_ready=False)
    daemons.append(daemon)
    # The suspects are tried last, one at a time: while the rest of the vault is indexed,
    # they wait, and are no failures meanwhile.
    wait_until(lambda: rows("suspects") == held, "the notes in hand are suspects")
    seen_waiting = False
    while not seen_waiting or rows("suspects"):
        waiting = bool(rows("suspects"))
        assert status(daemon)["failed"] == []
        # The CLI's own status command, in this process: asked over and over for as long as
        # the suspects wait, a fresh interpreter's start each time cost more than the answer.
        shown = CliRunner().invoke(main, ["status", "--config", str(config)])
        assert shown.exit_code == 0, shown.output
        assert "failed" not in shown.stdout
        seen_waiting = seen_waiting or (waiting and bool(rows("suspects")))
        if not seen_waiting and not rows("suspects"):
            pytest.fail("the suspects were tried before status could be asked; a bigger vault")
        time.sleep(0.1)
    daemon.wait_idle()
    report = status(daemon)
    assert report["failed"] == [] and report["quarantined"] == []
    assert report["notes"] == len(first + rest) and report["status"] == "ok"
    assert cli("status", "--config", str(config)).returncode == 0
    assert "the last run died while indexing these notes" in daemon.log_text()
    assert events(daemon, "note failed") == []
    assert rows("suspects") == [] and rows("in_flight") == []
    for name in held:
        indexed = daemon.request("GET", f"/v1/notes/{name}")
        assert indexed["status"] == "ok" and indexed["chunks"], indexed
    assert daemon.stop() == 0
