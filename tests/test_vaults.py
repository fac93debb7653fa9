"""Several vaults, one daemon each: isolation, `vaultd search --all`, and the template unit."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.daemon import RunningDaemon, short_socket_dir, start, write_config
from vaultd.cli import every_vault
from vaultd.cli.commands import main
from vaultd.errors import no_retry_codes

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]

#: Both vaults hold a note at the same path with different words: a hit shows whose it is.
VAULTS = {
    "work": {
        "Shared.md": "# Shared\n\nThe quarterly budget review moves to the blue meeting room.\n",
        "Deploys.md": "# Deploys\n\nProduction deploys happen on Tuesdays after the standup.\n",
    },
    "home": {
        "Shared.md": "# Shared\n\nThe sourdough starter needs feeding twice a day in summer.\n",
        "Garden.md": "# Garden\n\nPlant the tomatoes against the south wall in May.\n",
    },
}


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, RunningDaemon]]:
    sockets = short_socket_dir()
    running: dict[str, RunningDaemon] = {}
    try:
        for name, notes in VAULTS.items():
            root = tmp_path_factory.mktemp(name)
            vault = root / name  # the vault's folder name labels its hits in `--all`
            vault.mkdir()
            for path, text in notes.items():
                (vault / path).write_text(text, encoding="utf-8")
            sock = sockets / f"{name}.sock"
            config = write_config(root / f"{name}.toml", vault, root / "data", sock)
            running[name] = start(config, sock, root / "vaultd.log")
        yield running
    finally:
        for daemon in running.values():
            daemon.stop()
        shutil.rmtree(sockets, ignore_errors=True)


def texts(hits: list[dict[str, object]]) -> str:
    return " ".join(str(h["text"]) for h in hits)


@pytest.mark.parametrize("mode", ["hybrid", "keyword", "vector"])
def test_a_daemon_never_answers_with_another_vaults_notes(
    daemons: dict[str, RunningDaemon], mode: str
) -> None:
    work, home = daemons["work"], daemons["home"]
    hits = work.search("sourdough starter feeding tomatoes", k=10, mode=mode)
    assert "sourdough" not in texts(hits) and "tomatoes" not in texts(hits)
    assert {h["path"] for h in hits} <= set(VAULTS["work"])
    hits = home.search("quarterly budget production deploys", k=10, mode=mode)
    assert "budget" not in texts(hits) and "Tuesdays" not in texts(hits)
    assert {h["path"] for h in hits} <= set(VAULTS["home"])


def search_all(daemon: RunningDaemon, query: str, *extra: str) -> subprocess.CompletedProcess[str]:
    config = str(daemon.config)
    return subprocess.run(
        [sys.executable, "-m", "vaultd", "search", query, "--all", "--config", config, *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_search_all_merges_every_running_daemon(daemons: dict[str, RunningDaemon]) -> None:
    # A stale socket (a daemon that died without cleaning up) beside them is skipped, not fatal.
    stale = daemons["work"].socket.parent / "gone.sock"
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(stale))
    try:
        done = search_all(daemons["work"], "sourdough starter and the budget review", "--json")
    finally:
        stale.unlink()
    assert done.returncode == 0, done.stderr
    assert "skipped" in done.stderr and "gone.sock" in done.stderr
    hits = json.loads(done.stdout)["hits"]
    best = {h["vault_name"]: h for h in reversed(hits)}  # each vault's first hit
    assert set(best) == {"work", "home"}, hits
    assert best["work"]["path"] == best["home"]["path"] == "Shared.md"
    assert "budget" in best["work"]["text"] and "sourdough" in best["home"]["text"]
    assert best["work"]["vault"] == daemons["work"].request("GET", "/v1/status")["vault"]
    # Reciprocal rank fusion: the two vaults' first hits lead, then their second ones.
    assert {hits[0]["vault_name"], hits[1]["vault_name"]} == {"work", "home"}
    assert hits[0]["rank"] == hits[1]["rank"] == 1

    text = search_all(daemons["home"], "tomatoes deploys")
    assert text.returncode == 0, text.stderr
    assert "[home] Garden.md" in text.stdout and "[work] Deploys.md" in text.stdout


def test_search_all_waits_as_long_as_it_asks_the_daemons_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--all --wait-for NOTE --timeout S` gave each daemon 30 s to answer whatever S was: a
    wait longer than that read as a daemon that does not answer. Here the time to answer is
    a second and the note is indexed after a debounce of three. A wait that runs out was
    said only as "no running vaultd daemon answers"."""
    sockets = short_socket_dir()
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Garden.md").write_text("# Garden\n\nTomatoes want the south wall.\n")
    sock = sockets / "v.sock"
    config = write_config(tmp_path / "c.toml", vault, tmp_path / "data", sock, debounce="3s")
    daemon = start(config, sock, tmp_path / "vaultd.log")
    try:
        daemon.wait_idle()
        (vault / "Later.md").write_text("# Later\n\nThe zymurgy notes, written just now.\n")
        asked = ["search", "zymurgy", "--all", "--wait-for", "Later.md", "--json"]
        # A wait that runs out is the daemon's answer, said as it said it.
        late = CliRunner().invoke(main, [*asked, "--timeout", "0", "--config", str(config)])
        monkeypatch.setattr(every_vault, "ANSWER_SECONDS", 1.0)
        said = CliRunner().invoke(main, [*asked, "--timeout", "60", "--config", str(config)])
    finally:
        daemon.stop()
        shutil.rmtree(sockets, ignore_errors=True)
    assert late.exit_code == 1 and not late.stdout, late.output
    assert f"skipped {sock}: 'Later.md' was not indexed within 0 s" in late.stderr, late.stderr
    assert said.exit_code == 0, said.output
    assert json.loads(said.stdout)["hits"][0]["path"] == "Later.md", said.output


def test_search_all_says_so_when_no_daemon_runs(tmp_path: Path) -> None:
    sockets = short_socket_dir()
    try:
        (tmp_path / "vault").mkdir()
        config = write_config(
            tmp_path / "c.toml", tmp_path / "vault", tmp_path / "data", sockets / "x.sock"
        )
        done = subprocess.run(
            [sys.executable, "-m", "vaultd", "search", "x", "--all", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    assert done.returncode == 1
    assert "no running vaultd daemon answers in" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_template_unit_reads_one_config_per_instance(tmp_path: Path) -> None:
    text = (REPO / "systemd" / "vaultd@.service").read_text(encoding="utf-8")
    execs = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    assert execs == ["ExecStart=%h/.local/bin/vaultd run --config %h/.config/vaultd/%i.toml"]
    single = (REPO / "systemd" / "vaultd.service").read_text(encoding="utf-8")
    # Everything that makes a good service (priorities, watchdog, exit codes) is shared.
    codes = " ".join(str(code) for code in sorted(no_retry_codes()))
    for directive in ("Type=notify", "WatchdogSec=", f"RestartPreventExitStatus={codes}"):
        assert directive in single and directive in text
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here (no systemd): cannot verify the unit")
    unit = tmp_path / "vaultd@work.service"
    unit.write_text(text.replace(execs[0], "ExecStart=/bin/true " + execs[0].split(" ", 1)[1]))
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "SYSTEMD_LOG_COLOR": "0"}
    done = subprocess.run(
        [analyze, "verify", "--user", str(unit)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0 and unit.name not in done.stderr, done.stderr
