"""The commands vaultd's messages suggest carry the --config or --vault the user gave (issue 52):
a suggestion without them acts on another vault. A flag that names nothing is blamed, not a
config file.

Every message built with a `vaultd ...` command in it goes through `vaultd.hints.suggest`: the
source is read for message text that writes one out by hand. Then the real commands: an
interrupted `vaultd index --vault X`, the never-indexed answer of a real `vaultd mcp --vault X`,
`vaultd ui` and `vaultd status` with nothing to show, and bad flags.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession

from harness.daemon import PATIENCE, short_socket_dir
from tests.conftest import shared_path
from tests.mcp_session import session

PACKAGE = Path(__file__).resolve().parents[1] / "vaultd"
#: A command written out in a message: "`vaultd index`".
WRITTEN = re.compile(r"`vaultd [a-z]")
#: Text that names a command without telling the user to run it: what holds a lock, what wrote
#: a file, an exit status's meaning, the config file written by `init` (its own path, pinned).
DESCRIPTIONS = (
    "`vaultd index` or `reindex`",
    "`vaultd status`",
    "`vaultd doctor`",
    "`vaultd mcp` answering from the index",
    "`vaultd forget`",
    "a daemon starting while a query, `status`, `doctor` or `vaultd mcp` holds it",
    "`vaultd forget` removes it",
    "a `vaultd index` run",
    "the link file `vaultd ui` printed",
    "the running `vaultd ui`'s",
    "written by `vaultd init`",
    "`vaultd run` reads it",
    "`vaultd run --config ",
    "each starts `vaultd mcp` itself",
)
#: Modules not held to it yet: doctor's remedies still write their commands out by hand.
ELSEWHERE: set[str] = set()


def message_texts(path: Path) -> list[tuple[int, str]]:
    """The string literals of a module that are no docstring and no --help text."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = body[0] if body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skipped.add(id(first.value))
        if isinstance(node, ast.keyword) and node.arg == "help":
            skipped.update(id(inner) for inner in ast.walk(node.value))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in skipped
    ]


def test_no_message_writes_a_suggested_command_by_hand() -> None:
    written = [
        f"{path.relative_to(PACKAGE)}:{line}: {text[:90]!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if str(path.relative_to(PACKAGE)) not in ELSEWHERE
        for line, text in message_texts(path)
        if WRITTEN.search(text) and not any(d in text for d in DESCRIPTIONS)
    ]
    assert not written, "suggest commands with vaultd.hints.suggest:\n" + "\n".join(written)


def test_a_suggestion_carries_the_options_the_command_takes(tmp_path: Path) -> None:
    """`init` takes --config but names its vault as an argument: --vault is not carried."""
    from vaultd import hints
    from vaultd.cli.commands import main
    from vaultd.cli.common import options_of

    config, vault = tmp_path / "my config.toml", tmp_path / "notes"
    try:
        hints.given(config, vault, lambda words: options_of(main, words))
        assert hints.suggest("index") == f"`vaultd index --config '{config}' --vault {vault}`"
        assert hints.suggest("init", "DIR") == f"`vaultd init DIR --config '{config}'`"
        assert hints.command("service", "uninstall") == "vaultd service uninstall"
        hints.given(None, None)
        assert hints.suggest("run") == "`vaultd run`"
    finally:
        hints.given(None, None)


# -- the real commands -----------------------------------------------------------------------


def environment(root: Path) -> dict[str, str]:
    """No config file but the one named: the defaults live under `root`."""
    return {
        **os.environ,
        "XDG_DATA_HOME": str(root / "xdg-data"),
        "XDG_CONFIG_HOME": str(root / "xdg-config"),
        "XDG_RUNTIME_DIR": str(short_socket_dir()),
        "VAULTD_CONFIG": "",
        "NO_COLOR": "1",
    }


def vaultd(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vaultd", *args],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        env=environment(root),
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize("option", ["--vault", "--config"])
def test_an_interrupted_index_says_to_run_it_again_with_the_options_given(
    tmp_path: Path, option: str
) -> None:
    vault = tmp_path / "vault"
    shutil.copytree(shared_path("corpora", "obsidian-help", "en", "Getting started"), vault)
    config = tmp_path / "vaultd.toml"
    config.write_text(f'[vault]\npath = "{vault}"\n[log]\nlevel = "error"\n', encoding="utf-8")
    given = str(vault if option == "--vault" else config)
    with subprocess.Popen(
        [sys.executable, "-m", "vaultd", "index", "--json", option, given],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(tmp_path),
    ) as process:
        try:
            assert process.stderr is not None
            said: list[str] = []
            for line in process.stderr:
                said.append(line)
                if line.startswith('{"progress"') and json.loads(line)["progress"]["phase"] == (
                    "embed"
                ):
                    process.send_signal(signal.SIGINT)
                    break
            said.extend(process.stderr)
            assert process.wait(PATIENCE) == 130, "".join(said)
        finally:
            if process.poll() is None:
                process.kill()
    assert f"Run `vaultd index {option} {given}` again" in "".join(said), said


@pytest.mark.slow
def test_mcp_says_to_index_and_start_the_vault_it_was_given(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Otter.md").write_text("# Otter\n\nOtters hold hands.\n", encoding="utf-8")

    async def steps(client: ClientSession, hello: Any) -> Any:
        return hello, await client.call_tool("search", {"query": "otters"})

    env = {k: v for k, v in environment(tmp_path).items() if k != "NO_COLOR"}
    hello, answer = session(["mcp", "--vault", str(vault)], steps, env=env)
    assert f"`vaultd run --vault {vault}`" in hello.instructions, hello.instructions
    text = str(answer.content[0].text)
    assert answer.is_error and "never indexed" in text, text
    assert f"`vaultd index --vault {vault}`" in text, text
    assert f"`vaultd run --vault {vault}`" in text, text


def test_status_and_ui_with_nothing_to_show_name_the_vault_given(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    shown = vaultd(tmp_path, "status", "--vault", str(vault))
    assert f"`vaultd index --vault {vault}`" in shown.stderr, shown.stderr
    opened = vaultd(tmp_path, "ui", "--no-browser", "--vault", str(vault))
    assert f"`vaultd run --vault {vault}`" in opened.stderr, opened.stderr
    assert f"`vaultd ui --vault {vault}` again" in opened.stderr, opened.stderr


def test_doctor_advises_commands_for_the_vault_given(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Otter.md").write_text("# Otter\n\nOtters hold hands.\n", encoding="utf-8")
    checked = vaultd(tmp_path, "doctor", "--json", "--vault", str(vault))
    remedies = [c.get("remedy") or "" for c in json.loads(checked.stdout)["checks"]]
    assert f"`vaultd index --vault {vault}`" in " ".join(remedies), remedies


def test_a_bad_flag_is_blamed_not_a_config_file(tmp_path: Path) -> None:
    (tmp_path / "xdg-config" / "vaultd").mkdir(parents=True)
    default = tmp_path / "xdg-config" / "vaultd" / "config.toml"
    default.write_text(f'[vault]\npath = "{tmp_path}"\n', encoding="utf-8")
    missing = tmp_path / "nowhere"
    searched = vaultd(tmp_path, "search", "otters", "--vault", str(missing))
    assert searched.returncode == 78
    assert searched.stderr.strip() == f"vaultd: --vault {missing}: the folder does not exist"
    assert str(default) not in searched.stderr
    configured = vaultd(tmp_path, "status", "--config", str(missing / "c.toml"))
    assert configured.returncode == 78
    assert configured.stderr.strip() == f"vaultd: --config {missing / 'c.toml'}: file not found"
