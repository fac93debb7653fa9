"""The service files: what they say, that systemd and launchd can read them, and the installer."""

from __future__ import annotations

import os
import plistlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from vaultd.cli import service as unitfiles
from vaultd.cli.commands import main
from vaultd.errors import EXIT_STATUSES, ConfigError, VaultdError, no_retry_codes

REPO = Path(__file__).resolve().parents[1]
SHIPPED = {
    "systemd": REPO / "systemd" / "vaultd.service",
    "launchd": REPO / "systemd" / "com.vaultd.agent.plist",
}
VAULTD = [sys.executable, "-m", "vaultd"]


def unit_directives(text: str) -> dict[str, dict[str, list[str]]]:
    """A systemd unit file as section -> key -> values (keys may repeat; comments dropped)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"a directive outside any section: {raw!r}"
        assert "=" in line, f"not a directive: {raw!r}"
        key, value = line.split("=", 1)
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def one(sections: dict[str, dict[str, list[str]]], section: str, key: str) -> str:
    values = sections[section][key]
    assert len(values) == 1, f"{key} appears {len(values)} times"
    return values[0]


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """An environment whose HOME and XDG_CONFIG_HOME are empty temporary folders."""
    home = tmp_path / "home"
    home.mkdir()
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(tmp_path / "xdg-config")}


@pytest.fixture
def config(tmp_path: Path) -> Path:
    vault = tmp_path / "vault"
    vault.mkdir()
    path = tmp_path / "my config" / "vaultd.toml"
    path.parent.mkdir()
    path.write_text(f'[vault]\npath = "{vault}"\n', encoding="utf-8")
    return path


# -- the shipped templates ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["systemd", "launchd"])
def test_packaged_templates_are_the_files_in_systemd_folder(kind: unitfiles.Kind) -> None:
    assert unitfiles.template(kind) == SHIPPED[kind].read_text(encoding="utf-8")


def test_unit_file_directives() -> None:
    unit = unit_directives(SHIPPED["systemd"].read_text(encoding="utf-8"))
    assert set(unit) == {"Unit", "Service", "Install"}
    service = unit["Service"]
    expected = {
        "Type": "notify",
        "NotifyAccess": "main",
        "ExecStart": "%h/.local/bin/vaultd run",
        "ExecReload": "/bin/kill -HUP $MAINPID",
        "WatchdogSec": "60",
        "Restart": "on-failure",
        "RestartSec": "5",
        "TimeoutStopSec": "30",
        "Nice": "10",
        "CPUSchedulingPolicy": "batch",
        "IOSchedulingClass": "idle",
    }
    for key, value in expected.items():
        assert one(unit, "Service", key) == value, key
    # Restarting cannot fix a missing model, a locked data directory or a bad config.
    assert set(one(unit, "Service", "RestartPreventExitStatus").split()) >= {"70", "75", "78"}
    # What a first index was measured to need, with headroom (docs/benchmarks.md), and the
    # malloc arenas that measurement ran with.
    assert one(unit, "Service", "MemoryHigh") == "2G"
    # A limit that kills would only restart a first index into the same peak, again and again.
    assert "MemoryMax" not in service
    assert one(unit, "Service", "Environment") == "MALLOC_ARENA_MAX=2"
    assert "CPUQuota" not in service  # offered commented out, with the reason
    assert "#CPUQuota=" in SHIPPED["systemd"].read_text(encoding="utf-8")
    assert one(unit, "Install", "WantedBy") == "default.target"
    # The stop timeout leaves room for vaultd's own bound on the batch in flight.
    from vaultd.daemon.lifecycle import STOP_TIMEOUT

    assert int(one(unit, "Service", "TimeoutStopSec")) > STOP_TIMEOUT


def test_both_systemd_units_set_the_same_memory_limits() -> None:
    single = unit_directives(SHIPPED["systemd"].read_text(encoding="utf-8"))["Service"]
    per_vault = unit_directives((REPO / "systemd" / "vaultd@.service").read_text("utf-8"))
    for key in ("MemoryHigh", "Environment"):
        assert per_vault["Service"].get(key) == single.get(key), key


UNITS = [SHIPPED["systemd"], REPO / "systemd" / "vaultd@.service"]


def _error_classes() -> list[type[VaultdError]]:
    found: list[type[VaultdError]] = []
    pending: list[type[VaultdError]] = [VaultdError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def test_every_error_exits_with_a_code_of_the_table() -> None:
    table = {s.code for s in EXIT_STATUSES}
    for cls in _error_classes():
        assert cls.exit_code in table, f"{cls.__name__} exits {cls.exit_code}, not in the table"


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_exit_codes_in_the_units_match_the_table(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    unit = unit_directives(text)
    codes = {int(c) for c in one(unit, "Service", "RestartPreventExitStatus").split()}
    assert codes == no_retry_codes()
    # ... and the comment above the directive says what each one means.
    block = text[: text.index("RestartPreventExitStatus=")].rsplit("\n\n", 1)[-1]
    comment = " ".join(line.lstrip("# ") for line in block.splitlines())
    for code in codes:
        assert f" {code} " in comment, f"{path.name}: code {code} is not explained"


def test_the_plist_explains_the_codes_it_cannot_exempt() -> None:
    text = SHIPPED["launchd"].read_text(encoding="utf-8")
    block = text[: text.index("<key>KeepAlive</key>")].rsplit("<!--", 1)[-1]
    comment = " ".join(line.strip() for line in block.splitlines())
    for code in no_retry_codes():
        assert f" {code} " in comment, f"the plist does not explain exit code {code}"


def test_the_readme_lists_every_exit_code_as_the_table_says() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("**Exit codes**") :]
    rows = {}
    for line in section.splitlines()[2:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0].isdigit():
            rows[int(cells[0])] = (cells[1], cells[2])
    assert set(rows) == {s.code for s in EXIT_STATUSES}
    for status in EXIT_STATUSES:
        meaning, restarted = rows[status.code]
        assert meaning == status.meaning, status.code
        assert restarted.startswith("yes") == status.retry, status.code


def test_plist_template_parses_with_the_expected_keys() -> None:
    with SHIPPED["launchd"].open("rb") as handle:
        plist = plistlib.load(handle)
    assert plist["Label"] == "com.vaultd.agent"
    assert plist["ProgramArguments"][-1] == "run"
    assert plist["RunAtLoad"] is True
    assert plist["KeepAlive"] == {"SuccessfulExit": False}  # a clean stop is not respawned
    assert plist["ProcessType"] == "Background"
    assert plist["LowPriorityIO"] is True
    assert plist["Nice"] == 10
    assert plist["ThrottleInterval"] == 10
    for key in ("StandardOutPath", "StandardErrorPath"):
        assert plist[key].startswith("~/Library/Logs/vaultd/")


# -- rendering ---------------------------------------------------------------------------------


def test_vaultd_command_prefers_the_running_script(tmp_path: Path) -> None:
    script = tmp_path / "bin" / "vaultd"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n", encoding="utf-8")
    script.chmod(0o755)
    never = lambda name: None  # noqa: E731
    assert unitfiles.vaultd_command(str(script), "/nowhere/python", never) == [str(script)]
    # Run as `python -m vaultd`: the script beside that interpreter.
    python = tmp_path / "bin" / "python"
    assert unitfiles.vaultd_command("/x/__main__.py", str(python), never) == [str(script)]
    # No script anywhere: the interpreter itself, by its unresolved path.
    assert unitfiles.vaultd_command("/x/__main__.py", "/nowhere/python", never) == [
        "/nowhere/python",
        "-m",
        "vaultd",
    ]
    found = lambda name: str(script)  # noqa: E731
    assert unitfiles.vaultd_command("/x/__main__.py", "/nowhere/python", found) == [str(script)]


def test_systemd_quoting() -> None:
    assert unitfiles.systemd_quote("/usr/bin/vaultd") == "/usr/bin/vaultd"
    assert unitfiles.systemd_quote("/a b/c") == '"/a b/c"'
    assert unitfiles.systemd_quote("/100%/$HOME") == '"/100%%/$$HOME"'
    # systemd expands no variables in the program path itself (checked by the verify test).
    assert unitfiles.systemd_quote("/100%/$HOME", program=True) == '"/100%%/$HOME"'
    assert unitfiles.systemd_quote('/a "b"\\c') == '"/a \\"b\\"\\\\c"'


def test_rendered_unit(home: dict[str, str], config: Path) -> None:
    result = unitfiles.install(
        "systemd", config, dry_run=True, env=home, command=["/opt/v d/vaultd"]
    )
    unit = unit_directives(result.text)
    assert one(unit, "Service", "ExecStart") == f'"/opt/v d/vaultd" run --config "{config}"'
    template = unit_directives(unitfiles.template("systemd"))
    del unit["Service"]["ExecStart"], template["Service"]["ExecStart"]
    assert unit == template  # nothing else changes
    assert result.path == Path(home["XDG_CONFIG_HOME"]) / "systemd" / "user" / "vaultd.service"
    assert not result.path.exists() and not result.changed


def test_rendered_plist(home: dict[str, str], config: Path) -> None:
    command = ["/Applications/A & B/<vaultd>"]
    result = unitfiles.install("launchd", config, dry_run=True, env=home, command=command)
    plist = plistlib.loads(result.text.encode())
    assert plist["ProgramArguments"] == [*command, "run", "--config", str(config)]
    log = f"{home['HOME']}/Library/Logs/vaultd/vaultd.log"
    assert plist["StandardOutPath"] == plist["StandardErrorPath"] == log
    template = plistlib.loads(unitfiles.template("launchd").encode())
    for key in ("ProgramArguments", "StandardOutPath", "StandardErrorPath"):
        del plist[key], template[key]
    assert plist == template
    assert "<!--" in result.text  # the explanations stay
    assert result.path == Path(home["HOME"]) / "Library" / "LaunchAgents" / "com.vaultd.agent.plist"


def test_kind_auto_follows_the_platform() -> None:
    assert unitfiles.resolve_kind("auto", "darwin") == "launchd"
    assert unitfiles.resolve_kind("auto", "linux") == "systemd"
    assert unitfiles.resolve_kind("launchd", "linux") == "launchd"
    with pytest.raises(ValueError, match="unknown service kind"):
        unitfiles.resolve_kind("upstart", "linux")


def test_default_config_is_pinned(home: dict[str, str], config: Path) -> None:
    # What `vaultd run` would read in this shell is what the service reads.
    env = {**home, "VAULTD_CONFIG": str(config)}
    result = unitfiles.install("systemd", None, dry_run=True, env=env, command=["/bin/vaultd"])
    assert result.command == ["/bin/vaultd", "run", "--config", str(config)]


def test_no_unit_for_a_service_that_could_not_start(
    home: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing found, a broken file, a vault that is not there: each is refused, with what to
    do, and nothing is written (a unit that exits 78 at every start helps no one)."""
    for name, value in home.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("VAULTD_CONFIG", raising=False)
    bad = tmp_path / "bad.toml"
    bad.write_text("[vault]\npth = 1\n", encoding="utf-8")
    missing = tmp_path / "missing.toml"
    missing.write_text(f'[vault]\npath = "{tmp_path / "gone"}"\n', encoding="utf-8")
    cases = [
        (None, None, ["no vault configured", "vaultd init DIR"]),
        (bad, None, ["pth", "fix the file"]),
        (missing, None, ["does not exist"]),
        (None, tmp_path / "gone", ["does not exist"]),
    ]
    for config_file, vault, words in cases:
        with pytest.raises(ConfigError) as caught:
            unitfiles.install(
                "systemd", config_file, dry_run=False, vault=vault, env=home, command=["/b/vaultd"]
            )
        message = str(caught.value)
        assert all(w in message for w in words), message
        assert "no service file written" in message
        assert not unitfiles.unit_path("systemd", home).exists()


def test_vault_option_pins_the_vault(home: dict[str, str], tmp_path: Path) -> None:
    vault = tmp_path / "my notes"
    vault.mkdir()
    result = unitfiles.install(
        "systemd", None, dry_run=True, vault=vault, env=home, command=["/bin/vaultd"]
    )
    assert result.command == ["/bin/vaultd", "run", "--vault", str(vault.resolve())]


# -- systemd-analyze verify --------------------------------------------------------------------


def verify(unit: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here (no systemd): cannot verify the unit")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "SYSTEMD_LOG_COLOR": "0"}
    return subprocess.run(
        [analyze, "verify", "--user", str(unit)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def assert_verified(unit: Path, tmp_path: Path) -> None:
    done = verify(unit, tmp_path)
    # Unknown or malformed directives are only warnings (exit 0): fail on any line about ours.
    about_ours = [line for line in done.stderr.splitlines() if unit.name in line]
    assert done.returncode == 0 and not about_ours, done.stderr


def test_systemd_analyze_verifies_the_rendered_unit(
    home: dict[str, str], config: Path, tmp_path: Path
) -> None:
    # Whatever the path holds (spaces, %, $), systemd must find the program: verify checks that
    # ExecStart names an executable, so a quoting mistake fails here.
    odd = tmp_path / "a dir %i $HOME"
    odd.mkdir()
    program = odd / "vaultd"
    program.write_text("#!/bin/sh\n", encoding="utf-8")
    program.chmod(0o755)
    result = unitfiles.install("systemd", config, dry_run=False, env=home, command=[str(program)])
    assert_verified(result.path, tmp_path)
    # The interpreter form too.
    result = unitfiles.install("systemd", config, dry_run=False, env=home, command=VAULTD)
    assert_verified(result.path, tmp_path)


def test_systemd_analyze_catches_a_broken_unit(tmp_path: Path) -> None:
    """The check above would catch a mistake: a bad directive is reported."""
    unit = tmp_path / "broken.service"
    text = unitfiles.render_systemd(["/bin/true"]).replace("Nice=10", "Nice=eleven")
    unit.write_text(text, encoding="utf-8")
    done = verify(unit, tmp_path)
    assert "Nice" in done.stderr or "nice" in done.stderr


# -- the command -------------------------------------------------------------------------------


def invoke(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, args, env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_cli_dry_run_writes_nothing(home: dict[str, str], config: Path) -> None:
    code, out, err = invoke(
        ["service", "install", "--kind", "systemd", "--config", str(config), "--dry-run"], home
    )
    assert code == 0, err
    # stdout is the file alone, so `--dry-run > vaultd.service` works.
    assert out.startswith("# vaultd as a systemd USER service")
    assert unit_directives(out)["Service"]["ExecStart"][0].endswith(f'run --config "{config}"')
    assert "would write" in err and "systemctl --user daemon-reload" in err
    assert not Path(home["XDG_CONFIG_HOME"]).exists()
    assert not (Path(home["HOME"]) / ".config").exists()


@pytest.mark.parametrize("kind", ["systemd", "launchd"])
def test_cli_install_then_uninstall(kind: str, home: dict[str, str], config: Path) -> None:
    path = unitfiles.unit_path(kind, home)  # type: ignore[arg-type]
    code, out, err = invoke(["service", "install", "--kind", kind, "--config", str(config)], home)
    assert code == 0, err
    assert f"wrote {path}" in out
    text = path.read_text(encoding="utf-8")
    assert "--config" in text and str(config).replace("&", "&amp;") in text
    assert path.stat().st_mode & 0o777 == 0o644
    if kind == "systemd":
        assert "systemctl --user daemon-reload && systemctl --user enable --now vaultd" in out
        # What `systemctl --user enable` would add; uninstall must not leave it dangling.
        wants = path.parent / "default.target.wants"
        wants.mkdir()
        (wants / "vaultd.service").symlink_to(path)
    else:
        assert f"launchctl bootstrap gui/$(id -u) {path}" in out
        plist = plistlib.loads(text.encode())
        assert Path(plist["StandardErrorPath"]).parent.is_dir()  # launchd will not create it

    # Installing again changes nothing, and says how to pick up a changed file.
    code, out, _ = invoke(["service", "install", "--kind", kind, "--config", str(config)], home)
    assert code == 0 and f"unchanged: {path}" in out
    assert "restart" in out or "bootout" in out

    code, out, err = invoke(["service", "uninstall", "--kind", kind], home)
    assert code == 0, err
    assert f"removed {path}" in out
    assert not path.exists()
    assert not any(path.parent.glob("*.wants/*"))
    assert ("systemctl --user stop vaultd" if kind == "systemd" else "launchctl bootout") in out

    code, out, _ = invoke(["service", "uninstall", "--kind", kind], home)
    assert code == 0 and "nothing to remove" in out


def test_cli_missing_config_exits_78(home: dict[str, str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    code, _, err = invoke(["service", "install", "--config", str(missing)], home)
    assert code == 78
    assert "file not found" in err and str(missing) in err
    assert not Path(home["XDG_CONFIG_HOME"]).exists()


def test_cli_install_with_vault_writes_a_unit_that_runs_it(
    home: dict[str, str], tmp_path: Path
) -> None:
    """`vaultd service install --vault DIR` with no config file anywhere: the README's way."""
    vault = tmp_path / "Notes"
    vault.mkdir()
    path = unitfiles.unit_path("systemd", home)
    code, out, err = invoke(
        ["service", "install", "--kind", "systemd", "--vault", str(vault)], home
    )
    assert code == 0, err
    assert f"wrote {path}" in out
    exec_start = one(unit_directives(path.read_text(encoding="utf-8")), "Service", "ExecStart")
    assert exec_start.endswith(f" run --vault {vault.resolve()}")
    # Without --vault and with no config, nothing is written and the way out is said.
    path.unlink()
    code, _, err = invoke(["service", "install", "--kind", "systemd"], home)
    assert code == 78
    assert "--vault DIR" in err and "vaultd init" in err
    assert not path.exists()


def test_cli_help_texts() -> None:
    for args in (["service"], ["service", "install"], ["service", "uninstall"]):
        result = CliRunner().invoke(main, [*args, "--help"])
        assert result.exit_code == 0
        assert "Usage:" in result.output
        assert len(result.output.splitlines()) > 4
    result = CliRunner().invoke(main, ["service", "install", "--help"])
    for option in ("--kind", "--config", "--vault", "--dry-run"):
        assert option in result.output
    assert "service" in CliRunner().invoke(main, ["--help"]).output


def test_the_installed_vaultd_script_runs_the_command(home: dict[str, str], config: Path) -> None:
    """The real entry point, in a subprocess: what a user types."""
    done = subprocess.run(
        [*VAULTD, "service", "install", "--kind", "launchd", "--config", str(config), "--dry-run"],
        capture_output=True,
        text=True,
        env={**os.environ, **home},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    plist = plistlib.loads(done.stdout.encode())
    program = plist["ProgramArguments"]
    assert os.path.isabs(program[0])
    assert program[-3:] == ["run", "--config", str(config)]


def test_the_readme_and_the_help_name_the_exits_systemd_does_not_restart_after() -> None:
    """Both list the codes by hand: they say what RestartPreventExitStatus says."""
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    listed = re.search(r"never restarts it after exit ((?:\d+, )*\d+ or \d+)", readme)
    assert listed is not None
    assert {int(c) for c in re.findall(r"\d+", listed[1])} == no_retry_codes()
    shown = CliRunner().invoke(main, ["service", "install", "--help"], terminal_width=200)
    helped = re.search(r"cannot fix either \(((?:\d+, )*\d+):", " ".join(shown.output.split()))
    assert helped is not None, shown.output
    assert {int(c) for c in re.findall(r"\d+", helped[1])} == no_retry_codes()
