"""Service files for the current user: a systemd user unit or a launchd agent.

The templates ship as package data (`vaultd/resources/`; the copies in the repository's
`systemd/` folder are the ones people read and must stay identical). Rendering changes only
what depends on the user: the command line (the absolute path of this vaultd, plus the config
file) and, for launchd, which expands neither `~` nor `$HOME`, the home directory. Everything
else, comments included, is written as shipped.

Nothing here talks to systemd or launchd: `install` and `uninstall` write or remove one file
and say which command comes next.
"""

from __future__ import annotations

import getpass
import os
import plistlib
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Literal
from xml.sax.saxutils import escape

from vaultd.config import config_path, load_config
from vaultd.errors import ConfigError
from vaultd.hints import suggest

Kind = Literal["systemd", "launchd"]
KindChoice = Literal["systemd", "launchd", "auto"]
KINDS: tuple[str, ...] = ("auto", "systemd", "launchd")

SYSTEMD_UNIT = "vaultd.service"
LAUNCHD_LABEL = "com.vaultd.agent"
LAUNCHD_PLIST = f"{LAUNCHD_LABEL}.plist"
TEMPLATES: dict[Kind, str] = {"systemd": SYSTEMD_UNIT, "launchd": LAUNCHD_PLIST}

#: Characters a systemd command-line word may hold without quoting.
_SYSTEMD_SAFE = re.compile(r"[A-Za-z0-9/._+,:@=-]+")
_EXEC_START = re.compile(r"^ExecStart=.*$", re.MULTILINE)
_PROGRAM_ARGUMENTS = re.compile(
    r"(<key>ProgramArguments</key>\s*<array>)(.*?)(\n?[ \t]*</array>)", re.DOTALL
)


@dataclass(frozen=True, slots=True)
class InstallResult:
    """What `install` or `uninstall` did (or, on a dry run, would do)."""

    kind: Kind
    #: The service file written or removed.
    path: Path
    #: The rendered file; empty for `uninstall`.
    text: str
    #: Shell commands to run next, in order.
    next_steps: list[str]
    #: The command line the service manager will run.
    command: list[str] = field(default_factory=list)
    #: False on a dry run, when nothing changed, or when there was nothing to remove.
    changed: bool = False
    #: True when an existing file was replaced (install) or removed (uninstall).
    existed: bool = False
    #: Things the user should know: the config the service reads, problems found in it.
    notes: list[str] = field(default_factory=list)
    #: Why the next steps would fail here, and what to do instead (no service manager answers).
    warnings: list[str] = field(default_factory=list)


# -- where things go ---------------------------------------------------------------------------


def _home(env: Mapping[str, str]) -> Path:
    home = env.get("HOME", "")
    return Path(home) if os.path.isabs(home) else Path.home()


def resolve_kind(kind: str, platform: str | None = None) -> Kind:
    """`auto` is launchd on macOS and systemd everywhere else."""
    if kind == "auto":
        return "launchd" if (platform or sys.platform) == "darwin" else "systemd"
    if kind in ("systemd", "launchd"):
        return kind  # type: ignore[return-value]  # checked just above
    raise ValueError(f"unknown service kind {kind!r}; expected one of {', '.join(KINDS)}")


def unit_path(kind: Kind, env: Mapping[str, str] | None = None) -> Path:
    """Where the service file of this kind lives for the current user."""
    env = os.environ if env is None else env
    if kind == "launchd":
        return _home(env) / "Library" / "LaunchAgents" / LAUNCHD_PLIST
    # The XDG spec says a relative $XDG_CONFIG_HOME is invalid and must be ignored.
    config_home = env.get("XDG_CONFIG_HOME", "")
    base = Path(config_home) if os.path.isabs(config_home) else _home(env) / ".config"
    return base / "systemd" / "user" / SYSTEMD_UNIT


def launchd_log_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return _home(env) / "Library" / "Logs" / "vaultd" / "vaultd.log"


def vaultd_command(
    argv0: str | None = None,
    executable: str | None = None,
    which: Callable[[str], str | None] = shutil.which,
) -> list[str]:
    """The absolute command that starts this vaultd, without arguments.

    In order: the `vaultd` script being run, the `vaultd` script installed beside this
    interpreter (same environment), the first `vaultd` on PATH, else `python -m vaultd`.
    Symlinks are kept: `~/.local/bin/vaultd` from pipx survives upgrades, its target may not.
    """
    argv0 = sys.argv[0] if argv0 is None else argv0
    executable = sys.executable if executable is None else executable
    candidates: list[str | None] = []
    if Path(argv0).name == "vaultd":
        candidates.append(argv0)
    if executable:
        candidates.append(str(Path(executable).parent / "vaultd"))
    candidates.append(which("vaultd"))
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return [os.path.abspath(candidate)]
    # Not resolved: a virtual environment's python is a symlink that must stay one.
    return [os.path.abspath(executable or "python3"), "-m", "vaultd"]


# -- rendering ---------------------------------------------------------------------------------


def template(kind: Kind) -> str:
    """The shipped template of this kind, as text."""
    return resources.files("vaultd").joinpath("resources", TEMPLATES[kind]).read_text("utf-8")


def systemd_quote(word: str, *, program: bool = False) -> str:
    """One word of a systemd command line, quoted and escaped as systemd.syntax(7) says.

    `%` starts a specifier everywhere; `$` starts a variable in the arguments but not in the
    program path (systemd 252 takes `$$` there literally, as `systemd-analyze verify` shows).
    """
    escaped = word.replace("%", "%%")
    if not program:
        escaped = escaped.replace("$", "$$")
    if _SYSTEMD_SAFE.fullmatch(word):
        return escaped
    for char, replacement in (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\t", "\\t")):
        escaped = escaped.replace(char, replacement)
    return f'"{escaped}"'


def render_systemd(command: list[str]) -> str:
    text = template("systemd")
    words = [systemd_quote(w, program=i == 0) for i, w in enumerate(command)]
    exec_start = "ExecStart=" + " ".join(words)
    rendered, count = _EXEC_START.subn(lambda _: exec_start, text)
    if count != 1:
        raise RuntimeError(f"the unit template has {count} ExecStart= lines, expected one")
    return rendered


def render_launchd(command: list[str], home: Path) -> str:
    text = template("launchd")
    match = _PROGRAM_ARGUMENTS.search(text)
    if match is None:
        raise RuntimeError("the plist template has no ProgramArguments array")
    indent = re.search(r"\n([ \t]*)<string>", match.group(2))
    pad = indent.group(1) if indent else "\t\t"
    strings = "".join(f"\n{pad}<string>{escape(word)}</string>" for word in command)
    text = text[: match.start(2)] + strings + text[match.end(2) :]
    text = text.replace("<string>~/", f"<string>{escape(str(home))}/")
    # Whatever the paths held, the result must say exactly this; check it as launchd will read it.
    parsed = plistlib.loads(text.encode("utf-8"))
    log = str(home / "Library" / "Logs" / "vaultd" / "vaultd.log")
    if parsed.get("ProgramArguments") != command or parsed.get("StandardErrorPath") != log:
        raise RuntimeError("rendering the launchd plist went wrong")
    return text


def render(kind: Kind, command: list[str], env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    if kind == "launchd":
        return render_launchd(command, _home(env))
    return render_systemd(command)


# -- install and uninstall ---------------------------------------------------------------------


def _absolute(path: Path, env: Mapping[str, str]) -> Path:
    text = str(path)
    if text == "~" or text.startswith("~/"):
        return _home(env) / text[2:]
    return path.absolute()


def _pick_config(config: Path | None, env: Mapping[str, str]) -> Path | None:
    """The config file the service must read: the given one, else the one `vaultd run` would
    read in this shell (from $VAULTD_CONFIG or the default place), pinned by its path since the
    service manager's environment has neither this shell's variables nor, on macOS, its
    $XDG_CONFIG_HOME. None when there is none. A given file must exist."""
    if config is not None:
        path = _absolute(config, env)
        if not path.is_file():
            raise ConfigError(["file not found"], source=str(path))
        return path
    found = config_path(None, env)
    return _absolute(found, env) if found is not None else None


def _startable(
    config_file: Path | None, vault: Path | None, env: Mapping[str, str]
) -> tuple[Path | None, list[str]]:
    """The vault to pin on the command line and notes, once the service could start.

    The service reads what `vaultd run` reads here; whatever would stop it as it starts (an
    invalid file, no vault, a vault that is not there) is raised now, so that no unit is
    written that the service manager would start only to see it exit.
    """
    try:
        loaded = load_config(config_file, vault=vault, env=env)
        found = loaded.require_vault()
        loaded.require_store()
    except ConfigError as exc:
        fix = (
            "fix the file, or pass --vault DIR"
            if config_file is not None
            else f"pass --vault DIR, or write a config with {suggest('init', 'DIR')}"
        )
        raise ConfigError(
            [*exc.problems, f"no service file written: the service could not start; {fix}"],
            source=exc.source,
        ) from None
    notes = [f"config: {config_file}"] if config_file is not None else []
    notes.append(f"vault: {found}")
    return (found if vault is not None else None), notes


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.chmod(0o644)
    os.replace(temporary, path)


def _install_steps(kind: Kind, path: Path, existed: bool) -> list[str]:
    if kind == "systemd":
        if existed:
            return ["systemctl --user daemon-reload && systemctl --user restart vaultd"]
        return ["systemctl --user daemon-reload && systemctl --user enable --now vaultd"]
    bootstrap = f"launchctl bootstrap gui/$(id -u) {shlex.quote(str(path))}"
    if existed:
        return [f"launchctl bootout gui/$(id -u)/{LAUNCHD_LABEL}; {bootstrap}"]
    return [bootstrap]


def install(
    kind: KindChoice | str = "auto",
    config: Path | None = None,
    dry_run: bool = False,
    *,
    vault: Path | None = None,
    env: Mapping[str, str] | None = None,
    platform: str | None = None,
    command: list[str] | None = None,
    silence: Callable[[Kind], str | None] | None = None,
) -> InstallResult:
    """Write the service file for the current user (or, with `dry_run`, only render it).

    `vault` is --vault: the service runs `vaultd run --vault VAULT` (with the config file too,
    when one is given or found). `env` supplies HOME and XDG_CONFIG_HOME (default: this
    process's environment); `command` the program to start (default: this vaultd, see
    `vaultd_command`); `silence` says why the service manager does not answer, if it does
    not (default: `manager_silence`; the result then warns that its next steps fail here).
    Raises ConfigError, writing nothing, when a given config file does not exist or the
    service could not start with what it would read.
    """
    env = os.environ if env is None else env
    chosen = resolve_kind(kind, platform)
    path = unit_path(chosen, env)
    config_file = _pick_config(config, env)
    pinned_vault, notes = _startable(config_file, vault, env)
    program = list(command) if command is not None else vaultd_command()
    full = [*program, "run"]
    full += ["--config", str(config_file)] if config_file else []
    full += ["--vault", str(pinned_vault)] if pinned_vault else []
    text = render(chosen, full, env)
    existed = path.exists()
    changed = False
    warnings: list[str] = []
    if not dry_run:
        why = (silence or manager_silence)(chosen)
        if why is not None:
            warnings = _silent_manager(chosen, why, full)
        if chosen == "launchd":
            # launchd does not create the folder of StandardOutPath; the job would not start.
            launchd_log_path(env).parent.mkdir(parents=True, exist_ok=True)
        if not existed or path.read_text(encoding="utf-8", errors="replace") != text:
            _write(path, text)
            changed = True
    return InstallResult(
        kind=chosen,
        path=path,
        text=text,
        next_steps=_install_steps(chosen, path, existed),
        command=full,
        changed=changed,
        existed=existed,
        notes=notes,
        warnings=warnings,
    )


#: How long the service manager is given to answer.
PROBE_TIMEOUT = 10.0


def manager_silence(kind: Kind) -> str | None:
    """None when the user's service manager answers; else why not, as it said it. A machine
    with no user systemd (a container, an SSH session without logind) has `systemctl --user`
    fail with "Failed to connect to bus", and so would every next step."""
    probe = (
        ["systemctl", "--user", "show-environment"]
        if kind == "systemd"
        else ["launchctl", "print", f"gui/{os.getuid()}"]
    )
    try:
        done = subprocess.run(
            probe, capture_output=True, text=True, timeout=PROBE_TIMEOUT, check=False
        )
    except FileNotFoundError:
        return f"{probe[0]} is not installed"
    except subprocess.TimeoutExpired:
        return f"`{shlex.join(probe)}` did not answer in {PROBE_TIMEOUT:.0f} s"
    if done.returncode == 0:
        return None
    said = (done.stderr or done.stdout).strip().splitlines()
    return f"`{shlex.join(probe)}`: " + (said[-1] if said else f"exit {done.returncode}")


def _silent_manager(kind: Kind, why: str, full: list[str]) -> list[str]:
    """What to say when the service manager does not answer: the file is written, how to have
    a manager that runs it, and the command that runs vaultd meanwhile."""
    if kind == "systemd":
        remedy = (
            "run the steps below from a login that starts your user manager (a desktop or SSH "
            "login under systemd-logind), or have it run without a login: `loginctl "
            f"enable-linger {getpass.getuser()}` (as root), then the steps"
        )
    else:
        remedy = "run the steps below from your own logged-in macOS session"
    return [
        f"warning: the service manager does not answer ({why}); the service file is written "
        "but the steps below fail from here",
        f"  to start it: {remedy}",
        f"  meanwhile, run vaultd in a terminal: {shlex.join(full)}",
    ]


def uninstall(
    kind: KindChoice | str = "auto",
    dry_run: bool = False,
    *,
    env: Mapping[str, str] | None = None,
    platform: str | None = None,
) -> InstallResult:
    """Remove the service file (and, for systemd, the links `enable` made to it)."""
    env = os.environ if env is None else env
    chosen = resolve_kind(kind, platform)
    path = unit_path(chosen, env)
    existed = path.exists() or path.is_symlink()
    # `systemctl disable` needs the unit file; once it is gone, remove its links ourselves.
    links = sorted(path.parent.glob(f"*.wants/{path.name}")) if chosen == "systemd" else []
    links = [link for link in links if link.is_symlink()]
    if not dry_run:
        for link in links:
            link.unlink()
        if existed:
            path.unlink()
    if chosen == "systemd":
        steps = ["systemctl --user stop vaultd; systemctl --user daemon-reload"]
    else:
        steps = [f"launchctl bootout gui/$(id -u)/{LAUNCHD_LABEL}"]
    notes = [f"removed the link {link}" for link in links] if not dry_run else []
    if not existed:
        notes.append(f"nothing to remove: {path} does not exist")
    return InstallResult(
        kind=chosen,
        path=path,
        text="",
        next_steps=steps if existed or links else [],
        changed=(existed or bool(links)) and not dry_run,
        existed=existed,
        notes=notes,
    )
