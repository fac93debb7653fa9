"""`vaultd index` stopped by a signal keeps what it finished, and defers to a running daemon.

Real `vaultd index` processes with the real model over a copy of part of obsidian-help, stopped by
real signals at the points of the progress a user would see (`--json` prints it as JSON lines
on stderr); the index is read back with `vaultd status --json`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness.daemon import PATIENCE, running, short_socket_dir, write_config
from tests.conftest import shared_path
from vaultd.index import indexer

pytestmark = pytest.mark.slow

#: A stop asked for lands at the next safe point: one embedding run, then the close. The limit
#: only bounds a failure on a loaded machine; the runs print how long they took.
STOP_LIMIT = 20.0
#: The part of obsidian-help the stopped runs index: six folders, 785 chunks (45% of the
#: whole), about three commits' worth, so each stop still lands between commits and among
#: several embedding runs. The mechanism is the same on the whole corpus, in twice the time.
INTERRUPTED_FOLDERS = (
    "Getting started",
    "Obsidian Publish",
    "Editing and formatting",
    "User interface",
    "Obsidian Web Clipper",
    "Plugins",
)


def vaultd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vaultd", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ,
    )


def status(config: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(vaultd("status", "--json", "--config", str(config)).stdout)
    return result


def index_until(
    config: Path, stop_at: float | None, first_total: int | None, sig: int
) -> tuple[int, dict[str, Any], int, float]:
    """Run `vaultd index --json`; with `stop_at`, send `sig` once the embedding (measured
    against the first run's total, `first_total`, or this run's) has reached that share.
    Returns (exit code, the JSON printed, this run's embedding total, seconds from the
    signal to the exit)."""
    signalled: float | None = None
    total = 0
    with subprocess.Popen(
        [sys.executable, "-m", "vaultd", "index", "--json", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ,
    ) as process:
        try:
            assert process.stderr is not None and process.stdout is not None
            for line in process.stderr:
                if signalled is not None or not line.startswith('{"progress"'):
                    continue
                progress = json.loads(line)["progress"]
                if progress["phase"] != "embed" or not progress["total"]:
                    continue
                total = progress["total"]
                whole = first_total or total
                done = whole - total + progress["done"]
                if stop_at is not None and done >= stop_at * whole:
                    process.send_signal(sig)
                    signalled = time.monotonic()
            code = process.wait(PATIENCE)
            took = time.monotonic() - signalled if signalled is not None else 0.0
            out = process.stdout.read()
        finally:
            if process.poll() is None:
                process.kill()
    return code, json.loads(out) if out.strip() else {}, total, took


def test_a_first_index_stopped_at_30_60_and_90_percent_keeps_what_it_finished(
    tmp_path: Path,
) -> None:
    vault = tmp_path / "vault"
    source = shared_path("corpora", "obsidian-help", "en")
    for folder in INTERRUPTED_FOLDERS:
        shutil.copytree(source / folder, vault / folder)
    config = write_config(
        tmp_path / "vaultd.toml", vault, tmp_path / "data", short_socket_dir() / "s.sock"
    )
    first_total: int | None = None
    made = 0  # texts the stopped runs embedded, kept or not
    for share, sig in ((0.3, signal.SIGINT), (0.6, signal.SIGTERM), (0.9, signal.SIGINT)):
        code, report, total, took = index_until(config, share, first_total, sig)
        first_total = first_total or total
        assert code == 128 + sig, (share, code, report)
        assert report["stopped"] == signal.Signals(sig).name
        print(f"stopped at {share:.0%} by {report['stopped']} in {took:.1f} s: {report}")
        assert took < STOP_LIMIT
        made += report["chunks_embedded"]
        assert report["chunks_embedded"] > 0
        # What awaits is no more than what the model never finished (plus one commit's
        # worth, the margin the acceptance allows): all the rest was kept.
        now = status(config)
        assert now["awaiting"] == report["chunks_awaiting"]
        assert now["awaiting"] <= now["chunks"] - made + indexer.COMMIT_CHUNKS, (made, now)
        # and the store holds those chunks' records, searchable by meaning now
        assert now["chunks"] - now["awaiting"] >= made
    left = status(config)["awaiting"]
    code, summary, _, _ = index_until(config, None, None, signal.SIGINT)
    assert code == 0, summary
    # The last run embeds only what was left: every finished vector was kept.
    assert summary["chunks_embedded"] <= left
    assert made + summary["chunks_embedded"] <= status(config)["chunks"] + 3 * indexer.COMMIT_CHUNKS
    final = status(config)
    assert final["awaiting"] == 0 and final["embedded"] == final["notes"]
    hits = json.loads(
        vaultd("search", "how do I sync my vault", "--json", "--config", str(config)).stdout
    )
    assert hits, "the index answers by meaning after the interrupted runs"


def test_vaultd_index_with_a_daemon_running_asks_it_for_a_full_pass(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    for name in ("Tomatoes", "Basil", "Peppers"):
        (vault / f"{name}.md").write_text(f"# {name}\n\n{name} grow in the garden.\n")
    with running(vault, tmp_path) as daemon:
        result = vaultd("index", "--json", "--config", str(daemon.config))
        assert result.returncode == 0, result.stderr
        summary = json.loads(result.stdout)
        # The daemon's own pass: it read every note (as `vaultd reindex` asks), none changed.
        assert summary["notes_seen"] == 3
        assert summary["notes_checked"] == 3
        assert summary["chunks_embedded"] == 0
        assert daemon.process.poll() is None
        texted = vaultd("index", "--config", str(daemon.config))
        assert texted.returncode == 0, texted.stderr
        assert texted.stdout.startswith("3 notes: ")
