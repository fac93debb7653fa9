"""A `vaultd.db` damaged inside (its header intact) ends the daemon with exit 78, at start-up or
when met while running, and doctor names the file as damaged (issue 51, finding 4).

On the code before this change the daemon met the damage in its first pass, logged "indexing
failed; retrying" every 5 s without end with health `starting`, and doctor, asked meanwhile,
blamed the socket ("does not answer like vaultd"). Why exit 78 rather than a rebuild:
docs/operations.md, "A damaged vaultd.db".
"""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.daemon import PATIENCE, fault_env, short_socket_dir, write_config
from harness.vaults import random_text
from vaultd.errors import EXIT_CONFIG
from vaultd.layout import MANIFEST

VAULTD = [sys.executable, "-m", "vaultd"]
#: What the 60 KB of the finding overwrote.
NOISE = 60 * 1024


def vaultd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*VAULTD, *args], capture_output=True, text=True, timeout=PATIENCE, check=False
    )


@dataclass(frozen=True)
class Indexed:
    config: Path
    vault: Path
    data: Path
    socket: Path


@pytest.fixture
def indexed(tmp_path: Path) -> Indexed:
    """A vault of 150 notes, indexed (vaultd.db well over twice the noise)."""
    vault = tmp_path / "vault"
    vault.mkdir()
    rng = random.Random(51)
    for i in range(150):
        (vault / f"note {i}.md").write_text(random_text(rng, f"Note {i}"), encoding="utf-8")
    socket = short_socket_dir() / "v.sock"
    config = write_config(tmp_path / "vaultd.toml", vault, tmp_path / "data", socket)
    done = vaultd("index", "-q", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "data" / MANIFEST).stat().st_size > 4 * NOISE
    return Indexed(config, vault, tmp_path / "data", socket)


def damage_inside(manifest: Path) -> None:
    """Noise over 60 KB in the middle of the file: the header (and the schema on page 1) stay,
    so the file opens and only reading the pages hit fails."""
    size = manifest.stat().st_size
    with manifest.open("r+b") as handle:
        handle.seek(size // 2 - NOISE // 2)
        handle.write(random.Random(4).randbytes(NOISE))
    with closing(sqlite3.connect(manifest)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] > 0  # the header still reads
        try:
            found = db.execute("PRAGMA quick_check").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            found = str(exc)
    assert found != "ok"  # the damage is real


def test_a_manifest_damaged_inside_stops_the_start_with_78_and_doctor_names_it(
    indexed: Indexed,
) -> None:
    manifest = indexed.data / MANIFEST
    damage_inside(manifest)
    log = indexed.data.parent / "vaultd.log"
    with log.open("wb") as handle:
        # Before: never exits (a retry every 5 s); the timeout fails the test.
        done = subprocess.run(
            [*VAULTD, "run", "--config", str(indexed.config)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            timeout=PATIENCE,
            check=False,
        )
    text = log.read_text(encoding="utf-8", errors="replace")
    assert done.returncode == EXIT_CONFIG, text
    assert f"{manifest} is damaged" in text and f"mv {indexed.data}" in text, text
    assert "retrying" not in text
    assert manifest.is_file()  # left for the user to look at, not removed

    report = vaultd("doctor", "--config", str(indexed.config))
    assert report.returncode == 1, report.stdout
    lines = {line.split()[1]: line for line in report.stdout.splitlines() if line[:4].strip()}
    assert lines["manifest"].startswith("FAIL"), report.stdout
    assert f"{manifest} is damaged" in lines["manifest"], report.stdout
    assert not lines["socket"].startswith("FAIL"), report.stdout


#: The start-up check made blind: damage it would find is met by the pass instead, as damage
#: done after it (by a disk, or another program) is. Writing into a running daemon's file does
#: not do that reliably: its pages are in SQLite's cache and log, which a checkpoint writes
#: back over the damage.
BLIND_CHECK = """
import os

if os.environ.get("VDTEST_BLIND_CHECK"):
    from vaultd.storage import connection

    if hasattr(connection.Connection, "check"):
        connection.Connection.check = lambda self: None
"""


def test_damage_met_while_running_stops_the_daemon_with_78(
    indexed: Indexed, tmp_path: Path
) -> None:
    """Met by a pass, the damage stops the daemon with 78 instead of a retry every 5 s."""
    damage_inside(indexed.data / MANIFEST)
    env = fault_env(tmp_path, BLIND_CHECK, VDTEST_BLIND_CHECK="1")
    log = indexed.data.parent / "vaultd.log"
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [*VAULTD, "run", "--config", str(indexed.config)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
        )
    try:
        # Before: never exits; the wait fails the test.
        process.wait(PATIENCE)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(PATIENCE)
    text = log.read_text(encoding="utf-8", errors="replace")
    assert process.returncode == EXIT_CONFIG, text
    assert "the index's database is damaged; stopping" in text
    assert text.count("indexing failed; retrying") <= 1
    assert f"{indexed.data / MANIFEST} is damaged" in text
