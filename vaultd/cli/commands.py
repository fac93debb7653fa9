"""The `vaultd` command: a thin layer over the library, its commands in the modules named for
what they own (the query commands are rows of vaultd.cli.queries; status, the derived model,
init and forget their own modules); vaultd.cli.common holds what they share.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from vaultd import __version__
from vaultd.cli.common import (
    daemon,
    handle_errors,
    json_option,
    load,
    vault_command,
    vault_option,
)
from vaultd.cli.forget import forget as forget_command
from vaultd.cli.init import init as init_command
from vaultd.cli.model import model as model_command
from vaultd.cli.queries import FACES, command
from vaultd.cli.status import status as status_command
from vaultd.cli.ui import ui as ui_command


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="vaultd")
def main() -> None:
    """Keep an Obsidian vault indexed for retrieval, continuously and locally.

    \b
    Typical use:
      vaultd index --vault ~/Notes          index once (only changes cost work)
      vaultd search "how do I sync" --vault ~/Notes
      vaultd inspect ~/Notes/Ideas.md       what would be indexed for one note
    """
    from vaultd.layout import private_umask

    # The index, the log and the socket hold the vault's text: owner-only whatever the shell's
    # umask, as the unit files' UMask=0077 makes them for a service.
    private_umask()


@main.command()
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@json_option("Print one JSON object.")
@vault_command
def inspect(file: Path, as_json: bool, config_file: Path | None, vault: Path | None) -> None:
    """Parse and chunk one note and print what would be indexed.

    Touches no index. The note's path is shown relative to the vault when FILE is inside it.
    """
    from vaultd.config import load_config
    from vaultd.index.preview import preview_file, render_text

    config = load_config(config_file, vault=vault, env=os.environ)
    report = preview_file(file, config)
    if as_json:
        click.echo(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        click.echo(render_text(report))


@main.command()
@json_option("Print the summary as one JSON object; progress as JSON lines on stderr (not a tty).")
@click.option("--quiet", "-q", is_flag=True, help="Print only errors: no progress, no log.")
@vault_command
def index(as_json: bool, quiet: bool, config_file: Path | None, vault: Path | None) -> None:
    """Reconcile the index with the vault once, then exit.

    Only what changed costs work: unchanged files are not read, touched files are not
    re-embedded, renames re-use their vectors and edits embed only the chunks that changed.

    Two phases: every changed note is first made searchable by its words, then its chunks
    are embedded, the most recently modified notes first. The vectors are recorded every few
    seconds as they come. Ctrl-C (or SIGTERM) stops it within a second or two and keeps
    everything finished; the next run embeds only what is left. It then exits 130 (143 for
    SIGTERM); a second Ctrl-C stops at once, losing the last few seconds of embedding.

    With a daemon running for the vault, the daemon does the pass (reading every note, as
    `vaultd reindex` does) and this shows its progress until it ends.
    """
    from vaultd.cli import indexing
    from vaultd.errors import PassStoppedError
    from vaultd.index.open import open_index

    config = load(config_file, vault)
    if quiet:
        from vaultd.logs import only_errors

        only_errors()
    progress: Any = indexing.Bar(enabled=not quiet)
    if as_json and not quiet and not indexing.is_terminal():
        progress = indexing.JsonProgress()
    client = daemon(config)
    if client is not None:
        try:
            summary = indexing.on_daemon(client, progress)
        finally:
            progress.close()
    else:
        signals = indexing.StopSignals()
        with signals.installed(), open_index(config) as idx:
            try:
                try:
                    summary = idx.indexer.reconcile(progress, pause=signals.pause)
                except PassStoppedError:  # the signal ended the readers the pass waited on
                    raise signals.stopped() from None
            except indexing.Stopped as stop:
                progress.close()
                counts = idx.manifest.counts(idx.embedder.model_id)
                report = indexing.stopped_report(stop, counts, idx.indexer.vectors_made)
                if as_json:
                    click.echo(json.dumps(report))
                click.echo(indexing.stopped_message(report), err=True)
                sys.exit(stop.exit_code)
            finally:
                progress.close()
    if as_json:
        click.echo(json.dumps(summary.as_dict(), ensure_ascii=False))
        return
    s = summary
    click.echo(
        f"{s.notes_seen} notes: {s.notes_changed} new or changed, {s.notes_moved} moved, "
        f"{s.notes_deleted} deleted, {s.notes_touched} touched, {s.notes_failed} failed, "
        f"{s.notes_left_out} left out; "
        f"{s.chunks_embedded} chunks embedded, {s.chunks_reused} reused, "
        f"{s.chunks_deleted} deleted in {s.seconds:.1f} s"
    )
    for entry in s.left_out:
        click.echo(f"  left out: {entry['path']}: {entry['reason']}", err=True)
    for failure in s.failures:
        click.echo(f"  failed: {failure['path']}: {failure['reason']}", err=True)


@main.command()
@vault_command
def run(config_file: Path | None, vault: Path | None) -> None:
    """Run the daemon in the foreground: watch the vault and keep the index fresh.

    This is what a service manager starts (see `vaultd service install`). SIGTERM or Ctrl-C
    stops it gracefully (exit 0), a second Ctrl-C at once (exit 1); SIGHUP reloads the
    configuration.
    """
    try:
        from vaultd.daemon.lifecycle import Daemon

        config = load(config_file, vault)
        code = Daemon(config, config_file=config_file, vault_override=vault).run()
    except KeyboardInterrupt:
        # Ctrl-C before the daemon's own handlers are in place (loading the code and the
        # config): nothing was opened yet, so it is a stop like any other.
        sys.exit(0)
    except ImportError as exc:
        # The same Ctrl-C inside a compiled module's own start (onnxruntime's pybind11 init)
        # comes out as the ImportError it caused.
        if _interrupted(exc):
            sys.exit(0)
        raise
    sys.exit(code)


def _interrupted(exc: BaseException) -> bool:
    """Whether `exc` was caused by a Ctrl-C, however many exceptions it went through."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


@main.command()
@click.argument("paths", nargs=-1)
@vault_command
def reindex(paths: tuple[str, ...], config_file: Path | None, vault: Path | None) -> None:
    """Read notes (vault-relative PATHS, or the whole vault) and compare them with the index.

    Every note named (or every note) is read and hashed, whatever its size and times say.

    With a daemon running the work is queued there; otherwise it runs here and now. Exits 2
    when a PATH is not inside the vault (absolute, or with a `..` component).
    """
    from vaultd.api.operations import ReindexRequest, checked
    from vaultd.cli import indexing
    from vaultd.index.open import open_index

    # The paths checked and normalized as the daemon checks them, before anything is opened.
    request = checked(ReindexRequest, {"paths": list(paths)})
    paths = tuple(request.paths)
    config = load(config_file, vault)
    client = daemon(config)
    if client is not None:
        from vaultd.api.client import RemoteService

        RemoteService(client).reindex(request)
        click.echo(f"queued {'all notes' if not paths else f'{len(paths)} note(s)'} on the daemon")
        return
    with open_index(config) as idx:
        if paths:
            idx.indexer.retry(paths)  # a quarantined note named here gets one more try
        # Asked for by the user: read every note named (or all), whatever its stat says.
        summary = (
            idx.indexer.reconcile_paths(paths, verify=paths)
            if paths
            else idx.indexer.reconcile(indexing.Bar(True), check=1.0)
        )
    click.echo(
        f"{summary.notes_changed} changed, {summary.notes_deleted} deleted, "
        f"{summary.chunks_embedded} chunks embedded"
    )


_DOCTOR_COLOURS = {"ok": "green", "warn": "yellow", "fail": "red"}


@main.command()
@json_option('Print {"ok": bool, "checks": [{"name", "status", "message", "remedy"}]}.')
@vault_command
def doctor(as_json: bool, config_file: Path | None, vault: Path | None) -> None:
    """Check the installation and the index; say what is wrong and how to fix it.

    \b
    Checks, each ok, warn or fail:
      config    the config file loads and validates (every problem listed)
      model     model files present, SHA-256 verified, the ONNX session embeds;
                with precision = "int8", the derived model built and verified
      languages what a sample of the vault is written in; whether the model fits
      vault     the vault is a readable folder; notes found, unreadable paths
      store     data directory outside the vault, writable; free disk space
                (warn under 1 GiB or 5%, fail under 100 MiB)
      privacy   the index and the log are yours and closed to other users
      lock      whether a vaultd process holds the data directory, and its pid
      socket    directory 0700 and yours, socket 0600, path length, stale socket
      manifest  vaultd.db intact and this vault's; failed and left-out notes
      chroma    the store opens (probed in a child process) and holds exactly
                the manifest's chunk ids
      inotify   (Linux) max_user_watches against the vault's folder count

    Doctor changes nothing. With a daemon running it asks the daemon over its
    socket and leaves the lock and the store alone; otherwise it holds the lock
    only while it reads the store, and never waits for it or breaks it.

    Exit codes: 0 nothing failed (warnings allowed), 1 at least one check failed.
    """
    from vaultd.cli.doctor import render_text
    from vaultd.config import LogSection
    from vaultd.doctor.checks import diagnose
    from vaultd.logs import configure

    # The findings say everything; library log lines would only repeat them (and stdout must
    # stay clean for --json).
    configure(LogSection(level="error", format="console"), stream=sys.stderr)
    report = diagnose(config_file, vault, os.environ)
    if as_json:
        click.echo(json.dumps(report.as_json(), ensure_ascii=False, indent=2))
    else:
        click.echo(
            render_text(report, lambda text, status: click.style(text, fg=_DOCTOR_COLOURS[status]))
        )
    sys.exit(report.exit_code)


# -- service files (`vaultd service install|uninstall`) ------------------------------------------

_kind_option = click.option(
    "--kind",
    type=click.Choice(["auto", "systemd", "launchd"]),
    default="auto",
    show_default=True,
    help="systemd user unit, launchd agent, or auto: launchd on macOS, systemd elsewhere.",
)


@main.group()
def service() -> None:
    """Install or remove vaultd as a service of the current user (systemd or launchd).

    \b
    Typical use:
      vaultd service install --vault ~/Notes
      vaultd service install --config ~/.config/vaultd/config.toml
      vaultd service install --dry-run      print the file, write nothing
      vaultd service uninstall
    """


@service.command("install")
@_kind_option
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The config file the service reads. Default: the one `vaultd run` would read here "
    "($VAULTD_CONFIG, else $XDG_CONFIG_HOME/vaultd/config.toml), pinned by its path.",
)
@vault_option
@click.option(
    "--dry-run", is_flag=True, help="Print the file and where it would go; write nothing."
)
@handle_errors
def service_install(kind: str, config_file: Path | None, vault: Path | None, dry_run: bool) -> None:
    """Write the service file for the current user and print the command that starts it.

    The systemd unit goes to $XDG_CONFIG_HOME/systemd/user/vaultd.service (default
    ~/.config/systemd/user/), the launchd agent to ~/Library/LaunchAgents/com.vaultd.agent.plist.
    Both run this vaultd by its absolute path, at low CPU and IO priority, and restart it
    after a crash or a failure, not after a clean stop; systemd not after an exit a restart
    cannot fix either (2, 70, 75, 77, 78: a bad config, say), which launchd retries at most
    every 10 s. Installing again replaces the file.
    Nothing is written when the service could not start with what it would read (no vault,
    an invalid config): that is said instead, with exit 78.
    """
    import shlex

    from vaultd.cli.service import install

    result = install(kind, config_file, dry_run, vault=vault)
    if dry_run:
        # The file alone on stdout, so `--dry-run > FILE` works; the rest on stderr.
        click.echo(result.text, nl=False)
        click.echo(f"would write {result.path} ({result.kind})", err=True)
    elif result.changed:
        click.echo(f"wrote {result.path}")
    else:
        click.echo(f"unchanged: {result.path}")
    click.echo(f"runs: {shlex.join(result.command)}", err=dry_run)
    for note in result.notes:
        click.echo(note, err=dry_run)
    for warning in result.warnings:
        click.echo(warning, err=True)
    click.echo("next:", err=dry_run)
    for step in result.next_steps:
        click.echo(f"  {step}", err=dry_run)


@service.command("uninstall")
@_kind_option
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@handle_errors
def service_uninstall(kind: str, dry_run: bool) -> None:
    """Remove the service file of the current user and print the command that stops it."""
    from vaultd.cli.service import uninstall

    result = uninstall(kind, dry_run)
    if result.existed:
        click.echo(f"{'would remove' if dry_run else 'removed'} {result.path}")
    for note in result.notes:
        click.echo(note)
    if result.next_steps:
        click.echo("next:")
        for step in result.next_steps:
            click.echo(f"  {step}")


# -- AI tools: `vaultd mcp` ----------------------------------------------------------------------


class _McpCommand(click.Command):
    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from vaultd.cli.mcp_bridge import format_tools

        super().format_help_text(ctx, formatter)
        format_tools(formatter)


@main.command(cls=_McpCommand)
@click.option(
    "--socket",
    "socket_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The daemon's socket. Default: the vault's daemon, found as `vaultd status` finds it "
    "([server] socket, else the socket the daemon recorded in its data directory, else "
    "the vault's default socket).",
)
@vault_command
def mcp(socket_file: Path | None, config_file: Path | None, vault: Path | None) -> None:
    """Serve the vault to AI tools: an MCP server on stdin/stdout.

    Answers from the running daemon (`vaultd run`) of this vault, else from its index as last
    written. Whatever is wrong (no vault configured, no index yet) is said in each tool's
    answer, which the AI tool shows, with the command that fixes it. Tools take a note's path
    or its name as Obsidian resolves it ("Canvas").
    """
    from vaultd.cli.mcp_bridge import serve

    serve(config_file, vault, socket_file)


for _face in FACES:
    main.add_command(command(_face))
for _command in (status_command, model_command, init_command, forget_command, ui_command):
    main.add_command(_command)
