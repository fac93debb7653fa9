"""`vaultd status`: the index's counts, failures and freshness, from the daemon or the index."""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from vaultd.api.client import Client
from vaultd.api.operations import BY_NAME
from vaultd.cli.common import daemon, index_or_daemon, json_option, load, vault_command
from vaultd.storage.lock import Holder

if TYPE_CHECKING:
    from vaultd.index.open import Index


@click.command()
@json_option("Print one JSON object.")
@vault_command
def status(as_json: bool, config_file: Path | None, vault: Path | None) -> None:
    """Show the index: notes, chunks, failures and, from a running daemon, its health.

    Quarantined notes failed (or crashed vaultd) too often on their current content; they are
    skipped until they change or `vaultd reindex PATH` asks for them. Left-out files are no
    notes vaultd can index (over max_file_mb, binary, not UTF-8 text, unreadable). Notes indexed
    in part say what of them was not, and why (a PDF's pages OCR could not read).

    Exits 0 when healthy, 1 when degraded, notes failed or are quarantined, or the vault was
    never indexed.
    """
    from vaultd.errors import NotIndexedError

    config = load(config_file, vault)
    with ExitStack() as stack:
        found: Index | Client | None = daemon(config)
        if found is None:
            try:
                found = index_or_daemon(stack, config, Holder.STATUS, lambda: daemon(config))
            except NotIndexedError as exc:
                _never_indexed(exc, as_json)
                sys.exit(exc.exit_code)
        if isinstance(found, Client):
            # As the daemon sent it, unchecked by its model: printed as it came, and no model
            # is built for it.
            op = BY_NAME["status"]
            report = found.request(op.method, op.route)
            report["daemon"] = True
            report["socket"] = str(found.path)
        else:
            # Only here: the index's counts, read from the store (a daemon's answer has them).
            from vaultd.index.status import index_status

            report = {"daemon": False, "status": "stopped", **index_status(found).as_json()}
    if as_json:
        click.echo(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        report["socket"] = report.get("socket") or _no_socket(config)
        click.echo(_status_text(report))
    degraded = report["daemon"] and report["status"] == "degraded"
    if degraded or report["failed"] or report.get("quarantined"):
        sys.exit(1)


def _never_indexed(exc: Any, as_json: bool) -> None:
    if as_json:
        report = {
            "daemon": False,
            "status": "never_indexed",
            "vault": exc.vault,
            "store": {"data_dir": exc.data_dir},
            "message": str(exc),
        }
        click.echo(json.dumps(report, ensure_ascii=False, indent=2))
        return
    click.echo(f"vault:    {exc.vault}")
    click.echo("state:    never indexed, and no daemon running")
    click.echo(f"data:     {exc.data_dir} (not created yet)")
    click.echo(f"vaultd: {exc}", err=True)


def _status_text(report: dict[str, Any]) -> str:
    """`vaultd status` for a person: one line per fact, problems last."""
    lines = [f"vault:    {report['vault']}", *_state_lines(report), *_count_lines(report)]
    if report["daemon"]:
        lines += _daemon_lines(report)
    lines.append(f"model:    {report['model']}")
    if report.get("languages"):
        lines.append(f"text:     {report['languages']['summary']}")
    lines.append(f"data:     {report['store']['data_dir']}")
    if report.get("socket"):
        lines.append(f"socket:   {report['socket']}")
    return "\n".join(lines + _problem_lines(report))


def _state_lines(report: dict[str, Any]) -> list[str]:
    """The health, or what the daemon is doing, and the reasons it is not healthy."""
    from vaultd.progress import PHASE_NAMES

    state = report["status"] if report["daemon"] else "no daemon running"
    if report["daemon"] and report.get("state") == "indexing":
        # Health says "starting" until the first pass is done; a person is told what it does.
        phase = (report.get("progress") or {}).get("phase")
        state = f"indexing ({PHASE_NAMES.get(phase, phase)})" if phase else "indexing"
        if report["status"] == "degraded":
            state += "; degraded"
    reasons = (report.get("reasons") or {}).items()
    return [f"state:    {state}", *(f"  {key}: {reason}" for key, reason in reasons)]


def _count_lines(report: dict[str, Any]) -> list[str]:
    """What is indexed, by kind of file, and what still awaits its vectors."""
    from vaultd.index.status import by_kind_text, kinds_text

    left_out = report.get("left_out") or []
    aside = f", {len(left_out)} left out" if left_out else ""
    found = f", of {report['found']} found" if report.get("found") is not None else ""
    # An answer from before `by_kind` (a daemon not restarted since): its files as notes.
    by_kind = report.get("by_kind", {"note": report["notes"]})
    lines = [
        f"indexed:  {by_kind_text(by_kind)} ({report['notes']} files{found}; "
        f"{report['chunks']} chunks){aside}"
    ]
    lines.extend(kinds_text(report))  # kinds with files failed or left out; kinds not indexed
    if report.get("awaiting"):
        lines.append(
            f"vectors:  {report.get('embedded', 0)} of {report['notes']} files embedded, "
            f"{report['awaiting']} chunks awaiting; every note is searchable by its words"
        )
    return lines


def _daemon_lines(report: dict[str, Any]) -> list[str]:
    """What only a running daemon knows: its queue and pass, pacing, pending settings, lag,
    watching and memory."""
    from vaultd.cli.indexing import progress_line
    from vaultd.progress import Snapshot

    lines: list[str] = []
    say = lines.append
    lag = report["lag_seconds"]
    say(f"queue:    {report['queue_depth']}")
    if report.get("progress"):
        say(f"progress: {progress_line(Snapshot.from_json(report['progress']))}")
    if report.get("reading"):
        reading = report["reading"]
        say(f"reading:  {reading['path']} (for {reading['seconds']:.0f} s)")
    governor = report.get("governor") or {}
    if governor.get("waiting_for_busy_machine"):
        others = governor.get("others_share")
        share = f" (others use {others:.0%} of the CPU)" if others is not None else ""
        floor = governor.get("floor")
        least = f", to no less than {floor:.0%} of the time" if floor else ""
        say(f"slowed:   bulk indexing slows down while the machine is busy{share}{least}")
    if report.get("restart_pending"):
        waiting = ", ".join(report["restart_pending"])
        say(f"restart:  changed settings apply once the daemon restarts: {waiting}")
    if lag["samples"]:
        say(f"lag:      p50 {lag['p50']:.2f} s, p95 {lag['p95']:.2f} s")
    say(f"watching: {report['watch']['mode']}")
    closed = [
        what
        for what, loaded in (
            ("vector index", report["store"].get("loaded", True)),
            ("model", report.get("model_loaded", True)),
        )
        if not loaded
    ]
    unused = f" ({' and '.join(closed)} closed while unused)" if closed else ""
    if report.get("rss_mb") is not None:
        say(f"memory:   {report['rss_mb']} MB{unused}")
    return lines


def _problem_lines(report: dict[str, Any]) -> list[str]:
    """Each file left out, read in part, skipped, failed or quarantined, with its reason."""
    import time

    lines = [
        f"{key.replace('_', ' ') + ':':9} {entry['path']}: {entry['reason']}"
        for key in ("left_out", "in_part", "skipped", "failed")
        for entry in report.get(key) or []
    ]
    for held in report.get("quarantined", []):
        since = time.strftime("%Y-%m-%d %H:%M", time.localtime(held["since"]))
        lines.append(
            f"quarantined: {held['path']}: {held['reason']} "
            f"({held['attempts']} attempts, since {since})"
        )
    return lines


def _no_socket(config: Any) -> str:
    import os

    from vaultd.api.locate import looked_at

    sockets = looked_at(
        config.server.socket, config.require_vault(), config.require_store(), os.environ
    )
    return f"no daemon answers on {', '.join(sockets)}"
