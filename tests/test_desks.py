"""Two vaults side by side on the default configuration, as a user's desk has them.

Each daemon is started as systemd starts it (with `XDG_RUNTIME_DIR`), each client as a user or
an AI tool starts it: the CLI with `--vault` or `--config`, the MCP bridge by a real MCP client
with the SDK's default environment (no `XDG_RUNTIME_DIR`). Every answer must come from the
asked vault's daemon; a socket configured to another vault's daemon is a clear error.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession

from harness.daemon import NEVER_YIELD, RunningDaemon, copy_built_models, start, wait_until
from tests.mcp_session import error_text, session
from tests.test_mcp import call_with_config, payload
from vaultd.api.client import Client
from vaultd.embedding.derive import cache_dir
from vaultd.errors import VaultMismatchError
from vaultd.layout import vault_id

pytestmark = pytest.mark.slow

#: The same note path in both vaults, with words only one of them holds.
VAULTS = {
    "work": {
        "Shared.md": "# Shared\n\nThe quarterly budget review moves to the blue meeting room.\n"
        "See [[Deploys]].\n",
        "Ops/Deploys.md": "# Deploys\n\nProduction deploys happen on Tuesdays after standup.\n",
    },
    "home": {
        "Shared.md": "# Shared\n\nThe sourdough starter needs feeding twice a day in summer.\n",
        "Garden.md": "# Garden\n\nPlant the tomatoes against the south wall in May.\n",
    },
}
WORDS = {"work": "quarterly budget", "home": "sourdough starter"}


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("desk")
    home = root / "home-dir"
    home.mkdir()
    # A runtime directory as logind makes it, short enough for socket paths.
    runtime = Path(tempfile.mkdtemp(prefix="vd-rt-", dir="/tmp"))
    os.chmod(runtime, 0o700)
    # What systemd gives the daemon: HOME and XDG_RUNTIME_DIR, none of the test's XDG_* dirs.
    base = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "VAULTD_"))}
    env = {**base, "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime)}
    # The derived int8 model is built once per cache: this home gets a copy of the one the
    # other tests built, as a user who ran vaultd before has one (the first start's build is
    # tests/test_first_hour.py's and tests/test_derive.py's to prove).
    copy_built_models(cache_dir(os.environ), cache_dir(env))
    daemons: dict[str, RunningDaemon] = {}
    configs: dict[str, Path] = {}
    try:
        for name, notes in VAULTS.items():
            vault = root / name
            for path, text in notes.items():
                (vault / path).parent.mkdir(parents=True, exist_ok=True)
                (vault / path).write_text(text, encoding="utf-8")
            # The default configuration: no [server] socket, no [store] path (and bulk work
            # that does not wait for a loaded test machine, as every test daemon's).
            config = root / f"{name}.toml"
            config.write_text(
                f'[vault]\npath = "{vault}"\n\n[watch]\ndebounce = "200ms"\n\n'
                f'[log]\nlevel = "info"\nformat = "json"\n\n[embedding]\n{NEVER_YIELD}',
                encoding="utf-8",
            )
            configs[name] = config
            sock = runtime / "vaultd" / f"{name}-{vault_id(vault.resolve())[:8]}.sock"
            daemons[name] = start(config, sock, root / f"{name}.log", env=env)
        yield {"root": root, "env": env, "daemons": daemons, "configs": configs, "home": home}
    finally:
        for daemon in daemons.values():
            daemon.stop()
        shutil.rmtree(runtime, ignore_errors=True)


def cli(desk: dict[str, Any], *args: str, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "vaultd", *args],
        capture_output=True,
        text=True,
        env=env or desk["env"],
        timeout=120,
    )


def vault_of(desk: dict[str, Any], name: str) -> Path:
    return Path(desk["root"] / name).resolve()


def test_each_daemon_listens_on_a_socket_of_its_own_and_names_its_vault(
    desk: dict[str, Any],
) -> None:
    sockets = {name: d.socket for name, d in desk["daemons"].items()}
    assert len(set(sockets.values())) == 2
    for name, daemon in desk["daemons"].items():
        health = daemon.request("GET", "/v1/health")
        assert health["vault"] == str(vault_of(desk, name))
        assert health["vault_id"] == vault_id(vault_of(desk, name))
        assert health["pid"] == daemon.process.pid


@pytest.mark.parametrize(("name", "how"), [("work", "--vault"), ("home", "--config")])
def test_every_command_answers_from_the_asked_vault_only(
    desk: dict[str, Any], name: str, how: str
) -> None:
    other = "home" if name == "work" else "work"
    where = str(desk["root"] / name) if how == "--vault" else str(desk["configs"][name])
    found = cli(desk, "search", WORDS[name], how, where, "--json")
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)["hits"]
    assert hits and WORDS[name].split()[0] in hits[0]["text"]
    missing = cli(desk, "search", WORDS[other], how, where, "--json", "--mode", "keyword")
    assert missing.returncode == 0, missing.stderr
    assert all(WORDS[other].split()[0] not in h["text"] for h in json.loads(missing.stdout)["hits"])

    status = cli(desk, "status", how, where, "--json")
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["daemon"] is True
    assert report["vault"] == str(vault_of(desk, name))
    assert report["socket"] == str(desk["daemons"][name].socket)
    human = cli(desk, "status", how, where)
    assert f"socket:   {desk['daemons'][name].socket}" in human.stdout

    doctor = cli(desk, "doctor", how, where, "--json")
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["socket"]["status"] == "ok", checks["socket"]
    assert str(desk["daemons"][name].socket) in checks["socket"]["message"]
    assert checks["lock"]["status"] == "ok", checks["lock"]

    reindex = cli(desk, "reindex", "Shared.md", how, where)
    assert reindex.returncode == 0, reindex.stderr
    assert "queued" in reindex.stdout

    # Through the daemon, which holds the data directory's lock.
    exported = cli(desk, "export", how, where)
    assert exported.returncode == 0, exported.stderr
    records = [json.loads(line) for line in exported.stdout.splitlines()]
    documents = " ".join(r["document"] for r in records)
    assert WORDS[name].split()[0] in documents and WORDS[other].split()[0] not in documents


def test_a_client_without_the_runtime_variable_finds_the_daemon(desk: dict[str, Any]) -> None:
    """As an MCP client or a cron job starts it: only HOME, LOGNAME, PATH, SHELL, TERM, USER."""
    env = {k: desk["env"][k] for k in ("HOME", "PATH") if k in desk["env"]}
    found = cli(desk, "status", "--vault", str(desk["root"] / "home"), "--json", env=env)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["socket"] == str(desk["daemons"]["home"].socket)


def test_a_socket_configured_to_another_vaults_daemon_is_a_clear_error(
    desk: dict[str, Any],
) -> None:
    work = desk["daemons"]["work"]
    wrong = desk["root"] / "wrong.toml"
    wrong.write_text(
        f'[vault]\npath = "{desk["root"] / "home"}"\n\n[server]\nsocket = "{work.socket}"\n',
        encoding="utf-8",
    )
    for command in (["search", "sourdough"], ["status"], ["reindex"], ["export"]):
        done = cli(desk, *command, "--config", str(wrong))
        assert done.returncode == VaultMismatchError.exit_code, (command, done.stdout)
        assert f"serves {vault_of(desk, 'work')}, not this vault" in done.stderr, done.stderr

    # The MCP bridge stays up for its client and answers each call with what is wrong.
    async def steps(client: ClientSession, hello: Any) -> Any:
        return await client.call_tool("search", {"query": "sourdough"})

    text = error_text(session(["mcp", "--config", str(wrong)], steps, env=desk["env"]))
    assert f"serves {vault_of(desk, 'work')}" in text, text
    # A client asking for one vault refuses every answer from another, whatever the request.
    client = Client(work.socket, vault_id=vault_id(vault_of(desk, "home")))
    with pytest.raises(VaultMismatchError):
        client.request("POST", "/v1/search", {"query": "budget"})


def test_an_mcp_client_with_the_sdks_default_environment_finds_each_vaults_daemon(
    desk: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [k for k in os.environ if k.startswith(("XDG_", "VAULTD_"))]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(desk["home"]))
    for name, other in (("work", "home"), ("home", "work")):

        async def steps(session: ClientSession, name: str = name) -> Any:
            return payload(
                await session.call_tool("search", {"query": WORDS[name], "mode": "keyword"})
            )

        hits = call_with_config(desk["configs"][name], steps)["hits"]
        texts = " ".join(h["text"] for h in hits)
        assert WORDS[name].split()[0] in texts
        assert WORDS[other].split()[0] not in texts


def test_mcp_links_are_vault_paths_that_read_note_accepts(
    desk: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(desk["home"]))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    wait_until(
        lambda: bool(desk["daemons"]["work"].request("GET", "/v1/notes/Shared.md")),
        "Shared.md is indexed",
    )

    async def steps(session: ClientSession) -> Any:
        links = payload(await session.call_tool("links", {"path": "Shared.md"}))
        target = links["links"][0]
        read = payload(await session.call_tool("read_note", {"path": target["path"]}))
        return target, read

    target, read = call_with_config(desk["configs"]["work"], steps)
    assert target["target"] == "Deploys" and target["path"] == "Ops/Deploys.md"
    assert "Tuesdays" in read["text"]
