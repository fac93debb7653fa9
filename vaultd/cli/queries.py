"""The query commands: each a row of `FACES`, built by one factory from its operation.

A face says only what is the command's own: the field it takes as its argument, options of its
own form (and the fields they fill), and how it prints an answer for a person. Everything else
follows from the operation (vaultd.api.operations): the help is its docstring, and each other
field of its request model is an option with the field's description as help and its default,
bounds (a range), choices and repetition. A field added to a model is an option here with no
code. The command builds the request model (refused by the daemon's rules, before anything is
opened), asks the vault's daemon (RemoteService) or, with none running, the index opened
read-only (LocalService, the code the daemon answers with), and prints the response model.
Each parameter is named for the field it fills, so a refusal naming a field names the option
or argument typed instead (vaultd.cli.common.typed).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import click
from pydantic_core import PydanticUndefined

from vaultd.api.operations import BY_NAME, bounds, checked
from vaultd.cli import common

Answer = dict[str, Any]


@dataclass(frozen=True)
class Face:
    """How one operation is a `vaultd` command."""

    operation: str
    #: Prints an answer (its JSON) for a person; `--json` prints the JSON itself.
    show: Callable[[Answer], None] | None = None
    #: Said after the operation's docstring in the command's help.
    usage: str = ""
    #: The field taken as the command's argument (`path`: a note, resolved as NOTE_USAGE says).
    argument: str = ""
    #: Fields not offered as generated options: filled by `options` through `shape`, or left
    #: to their default.
    own: tuple[str, ...] = ()
    #: The command's own options (click decorators).
    options: tuple[Callable[[Any], Any], ...] = ()
    #: The own options' values as fields.
    shape: Callable[[dict[str, Any]], dict[str, Any]] | None = None


#: How the CLI spells a request field where not `--field-name`, with the metavar of one that
#: takes a value.
SPELLINGS: dict[str, tuple[str, str]] = {
    "k": ("-k", ""),
    "tags": ("--tag", "TAG"),
    "tags_any": ("--any-tag", "TAG"),
    "path_prefix": ("--path", "PREFIX"),
    "since": ("--since", "WHEN"),
    "kinds": ("--kind", ""),
    "packages": ("--package", "NAME"),
    "vectors": ("--with-vectors", ""),
    "wait_for": ("--wait-for", "NOTE|idle"),
    "timeout": ("--timeout", "SECONDS"),
}

NOTE_USAGE = (
    'NOTE is a vault path ("Folder/Note.md"), the path of the note\'s file, or its name as '
    'Obsidian takes it ("Note", "folder/note").'
)


def command(face: Face) -> click.Command:
    """The `vaultd` command of one face."""
    op = BY_NAME[face.operation]
    fields = op.request.model_fields

    def run(config_file: Path | None, vault: Path | None, **given: Any) -> None:
        as_json = given.pop("as_json", False)
        given = face.shape(given) if face.shape else given
        every_vault = given.pop("all_vaults", False)
        config = None
        if face.argument == "path":  # the vault tells a note's path
            config = common.load(config_file, vault)
            given["path"] = note_in_vault(given["path"], config.require_vault())
        # Options not given take the model's defaults. Refused by the rules the daemon applies,
        # before anything is opened.
        request = checked(op.request, {k: v for k, v in given.items() if v is not None})
        config = config if config is not None else common.load(config_file, vault)
        if op.stream:
            with common.DaemonOrIndex.of(config).service() as answering:
                for record in getattr(answering, face.operation)(request):
                    line = record.model_dump(mode="json", exclude_unset=True)
                    click.echo(json.dumps(line, ensure_ascii=False, sort_keys=True))
            return
        if every_vault:
            from vaultd.cli.every_vault import search_every_vault

            answer = search_every_vault(config, request)
        else:
            answer = ask(config, face.operation, request, given.get("path"))
        if as_json or face.show is None:
            click.echo(json.dumps(answer, ensure_ascii=False))
        else:
            face.show(answer)

    params: list[click.Parameter] = []
    if face.argument:
        info = fields[face.argument]
        required = info.is_required()
        params.append(
            click.Argument(
                [face.argument],
                required=required,
                default=None if required else info.default,
                metavar="NOTE" if face.argument == "path" else None,
            )
        )
    taken = {face.argument, *face.own}
    params += [_option(name, info) for name, info in fields.items() if name not in taken]
    decorated: Any = run
    shared: tuple[Callable[[Any], Any], ...] = (common.config_option, common.vault_option)
    if not op.stream:
        shared = (common.json_option("Print the answer as JSON."), *shared)
    for decorate in (*face.options, *shared):
        decorated = decorate(decorated)
    params += getattr(decorated, "__click_params__", [])
    text = op.doc + (f"\n\n{face.usage}" if face.usage else "")
    return click.Command(
        face.operation, callback=common.handle_errors(run), params=params, help=text
    )


def _option(name: str, info: Any) -> click.Option:
    """A request field as an option: its help, default, bounds, choices and repetition."""
    spelled, metavar = SPELLINGS.get(name, ("--" + name.replace("_", "-"), ""))
    kind, metadata = info.annotation, list(info.metadata)
    optional = get_origin(kind) in (Union, UnionType)
    if optional:  # `int | None`: an int, if given
        kind = next(a for a in get_args(kind) if a is not type(None))
    if get_origin(kind) is Annotated:  # `LineNumber | None`: its bounds are in its metadata
        kind, *extra = get_args(kind)
        metadata += [m for more in extra for m in getattr(more, "metadata", [more])]
    low, high = bounds(metadata)
    out: dict[str, Any] = {"help": info.description, "metavar": metavar or None}
    decls = [spelled, name]
    if kind is bool:
        if optional:  # unset: the daemon's setting
            decls[0] = f"{spelled}/--no-{spelled[2:]}"
        default = None if info.default is None else bool(info.default)
        return click.Option(decls, is_flag=True, default=default, help=info.description)
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
    return click.Option(decls, **out)


def ask(config: Any, operation: str, request: Any, note: str | None = None) -> Answer:
    """The answer's JSON; a note no indexed note answers to is the user's input."""
    from vaultd.errors import NoteNotIndexedError, QueryError
    from vaultd.hints import suggest

    try:
        answer = common.DaemonOrIndex.of(config).call(operation, request)
    except NoteNotIndexedError:
        if note is None:
            raise
        raise QueryError(f"{note} is not an indexed note (see {suggest('status')})") from None
    dumped: Answer = answer.model_dump(mode="json", exclude_unset=True)
    return dumped


def note_in_vault(note: str, vault: Path) -> str:
    """A vault path for NOTE, given as one or as the path of a file inside the vault."""
    from vaultd.errors import QueryError

    given = Path(note)
    if given.is_file():
        try:
            return given.resolve().relative_to(vault.resolve()).as_posix()
        except ValueError:
            raise QueryError(f"{note} is not inside the vault {vault}") from None
    return PurePosixPath(note.replace("\\", "/")).as_posix()


# -- how each answer reads for a person ----------------------------------------------------------


def counted(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def snippet(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat[:width] + "…" if len(flat) > width else flat


def styled() -> bool:
    """Whether to style what is printed: on a terminal, unless the user set NO_COLOR."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def highlighted(text: str, ranges: list[list[int]], width: int | None = None) -> str:
    """`text` on one line (each run of blank space one space, cut to `width` with "…"), the
    `ranges` of it (a hit's `highlights`) bold when `styled`; the text printed as it is, its
    own `**bold**` included."""
    inside = {at for start, end in ranges for at in range(start, end)}
    chars: list[tuple[str, bool]] = []  # each character shown, and whether it is highlighted
    for at, char in enumerate(text):
        if not char.isspace():
            if chars and chars[-1][0] == " ":  # a space inside a phrase matched is bold too
                chars[-1] = (" ", chars[-1][1] and at in inside)
            chars.append((char, at in inside))
        elif chars and chars[-1][0] != " ":
            chars.append((" ", at in inside))
    if chars and chars[-1][0] == " ":
        chars.pop()
    more = "…" if width is not None and len(chars) > width else ""
    shown = chars[:width]
    if not styled():
        return "".join(char for char, _ in shown) + more
    out = []
    for bold, group in itertools.groupby(shown, key=lambda c: c[1]):
        run = "".join(char for char, _ in group)
        out.append(click.style(run, bold=True) if bold else run)
    return "".join(out) + more


def marked(text: str) -> str:
    """A mention's marks (`**name**`) in bold on a terminal; elsewhere as they are."""
    parts = text.split("**")
    if len(parts) % 2 == 0 or not styled():
        return text
    return "".join(click.style(p, bold=True) if i % 2 else p for i, p in enumerate(parts))


#: How the CLI names the known-item tiers (vaultd.index.known) that order hits above scores.
TIER_WORDS = {
    "name": "name",
    "definition": "its definition",
    "phrase": "exact phrase",
    "stemmed phrase": "phrase, other word forms",
    "corrected phrase": "phrase, typo corrected",
    "proximity": "words close together",
    "rare word": "rare word",
}


def located(hit: Answer) -> str:
    """Where a hit is, as its kind is read: a PDF's pages, a canvas's card (a drawing's
    element), source code's symbol, a screenshot by its name alone, a note's lines."""
    path: str = hit["path"]
    kind = hit.get("kind", "note")
    if hit.get("page") is not None:
        first, last = hit["page"], hit.get("page_end") or hit["page"]
        return f"{path}, p. {first}" if first == last else f"{path}, pp. {first}–{last}"
    if hit.get("node") is not None:
        return f"{path}, {'element' if kind == 'excalidraw' else 'card'} {hit['node']}"
    if hit.get("symbol") is not None:
        return f"{path}, {hit['symbol']}"
    if kind == "image":  # the lines of the words read off it mean nothing to a person
        return path
    return f"{path}:{hit['start_line']}-{hit['end_line']}"


def ordered_by(hit: Answer) -> str:
    """What put a hit where it is: the known-item tier that ranks it above the scored hits
    (whose scores may then read higher below it), else its score."""
    tier: str | None = hit.get("ranked_by")
    if not tier:
        return f"({hit['score']:.4f})"
    return f"[{TIER_WORDS.get(tier, tier)}]"


def _show_search(answer: Answer) -> None:
    from vaultd.hints import suggest

    if answer.get("not_waited"):
        click.echo(
            "vaultd: no daemon is running, so nothing was waited for: these hits are from the "
            f"index as last written ({suggest('run')} keeps it fresh)",
            err=True,
        )
    if answer.get("showing"):
        click.echo(f"showing results for {answer['showing']}")
    if answer.get("did_you_mean"):
        click.echo(f"did you mean: {answer['did_you_mean']}")
    if not answer["hits"]:
        click.echo("no hits")
    for rank, h in enumerate(answer["hits"], 1):
        place = located(h)
        if "vault" in h:  # --all: labelled with its vault, ordered by the fusion's score
            place, why = f"[{h['vault_name']}] {place}", f"({h['score']})"
        else:  # during a first index a note is found by its words before its vectors are in
            pending = "" if h["indexed"] else "  [words only: vectors pending]"
            why = ordered_by(h) + pending
        # A code passage's section is its symbol, said in its place already.
        shown = h["section"] and not (h.get("symbol") and h["section"] == h["symbol"])
        section = f" › {h['section']}" if shown else ""
        # A source passage says which package it is in: what "where is X in package Y" asks.
        package = f" · package {h['package']}" if h.get("package") else ""
        heading = f"  {h['title']}{section}{package}  {why}"
        click.echo(click.style(f"{rank}. {place}", bold=True) + heading)
        if h.get("explain") is not None:
            from vaultd.query import explain_line

            click.echo(f"   {explain_line(h['explain'])}")
        ranges = h.get("highlights", [])
        if h.get("snippet") is not None:
            click.echo("   " + highlighted(h["snippet"], ranges))
        else:
            click.echo("   " + highlighted(h.get("text") or "", ranges, 200))


def _where(given: dict[str, Any]) -> dict[str, Any]:
    from vaultd.query import parse_where_flag, where_json

    conditions = given.pop("where_flags")
    given["where"] = where_json([parse_where_flag(c) for c in conditions]) if conditions else None
    return given


def _show_related(answer: Answer) -> None:
    if not answer["related"]:
        click.echo("no related notes")
    for rank, r in enumerate(answer["related"], 1):
        linked = "  [linked]" if r["linked"] else ""
        click.echo(
            click.style(f"{rank}. {r['path']}", bold=True)
            + f"  {r['title']}  (score {r['score']:.3f}){linked}"
        )
        source, target = r["source"], r["target"]
        click.echo(
            f"   lines {source['start_line']}-{source['end_line']} here ~ "
            f"lines {target['start_line']}-{target['end_line']} there "
            f"({r['similarity']:.3f}): " + snippet(target["text"], 160)
        )


def _lines(given: dict[str, Any]) -> dict[str, Any]:
    from vaultd.errors import QueryError

    lines = given.pop("lines")
    if lines:
        first, _, last = lines.partition("-")
        if not (first.isdigit() and last.isdigit() and 1 <= int(first) <= int(last)):
            raise QueryError(f"--lines takes A-B (line numbers, A <= B), not {lines!r}")
        given.update(start_line=int(first), end_line=int(last))
    return given


def _text_of_a_range(given: dict[str, Any]) -> dict[str, Any]:
    # Lines or pages are asked of the text (the API reads them only with it): --text implied.
    ranges = ("start_line", "end_line", "start_page", "end_page")
    if any(given.get(name) is not None for name in ranges):
        given["text"] = True
    return given


def _show_mentions(answer: Answer) -> None:
    if not answer["mentions"]:
        click.echo("no unlinked mentions")
    for m in answer["mentions"]:
        click.echo(click.style(f"{m['path']}:{m['start_line']}-{m['end_line']}", bold=True))
        click.echo("   " + marked(" ".join(m["text"].split())))


def _show_backlinks(answer: Answer) -> None:
    if not answer["backlinks"]:
        click.echo("no backlinks")
    for b in answer["backlinks"]:
        links = counted(b["links"], "link")
        click.echo(click.style(b["path"], bold=True) + f"  {b['title']}  ({links})")
        for p in b["passages"]:
            lines = ", ".join(str(n) for n in p["link_lines"])
            click.echo(f"   line {lines}: " + snippet(p["text"], 200))


def _show_note(answer: Answer) -> None:
    if answer.get("text") is not None:
        click.echo(answer["text"])
        if answer.get("total_pages") is not None:
            where = f"pages {answer['start_page']}-{answer['end_page']} of {answer['total_pages']}"
        else:
            where = f"lines {answer['start_line']}-{answer['end_line']} of {answer['total_lines']}"
        click.echo(f"({answer['path']}, {where})", err=True)
        return
    click.echo(click.style(answer["path"], bold=True) + f"  {answer['title']}  ({answer['kind']})")
    parts = (("chunks", "passage"), ("links", "link"), ("backlinks", "backlink"))
    counts = ", ".join(counted(len(answer[key]), what) for key, what in parts)
    click.echo(f"   {answer['status']}, {counts}")


def _show_outline(answer: Answer) -> None:
    if not answer["headings"]:
        click.echo("no headings")
    for h in answer["headings"]:
        click.echo(f"{'  ' * (h['level'] - 1)}{h['text']}  ({h['start_line']}-{h['end_line']})")


def _show_tags(answer: Answer) -> None:
    if not answer["tags"]:
        click.echo("no tags")
    for t in answer["tags"]:
        click.echo(f"{t['notes']:>6}  #{t['tag']}")


def _show_recent(answer: Answer) -> None:
    if not answer["notes"]:
        click.echo("no notes")
    for n in answer["notes"]:
        tagged = "  " + " ".join(f"#{t}" for t in n["tags"]) if n["tags"] else ""
        click.echo(f"{n['modified']}  {n['path']}  {n['title']}{tagged}")


FACES: tuple[Face, ...] = (
    Face(
        "search",
        _show_search,
        "Put a phrase in double quotes to rank passages holding it exactly first. Exits 2 for "
        "a query or filter that cannot be searched (empty, too long, malformed), with or "
        "without a daemon.",
        argument="query",
        # The conditions take the CLI's own form.
        own=("where",),
        options=(
            click.option(
                "--where",
                "where_flags",
                multiple=True,
                metavar="COND",
                help="A frontmatter condition: 'status=done', 'status=a,b' (one of), "
                "'year>=2020', 'due<2025-01-01'; repeatable, all must hold.",
            ),
            click.option(
                "--all",
                "all_vaults",
                is_flag=True,
                help="Ask every running daemon (every *.sock beside the configured socket, by "
                "default $XDG_RUNTIME_DIR/vaultd/) and merge their hits, each labelled with its "
                "vault.",
            ),
        ),
        shape=_where,
    ),
    Face(
        "related",
        _show_related,
        NOTE_USAGE + " Nothing is embedded: the answer is as fresh as the index.",
        argument="path",
        own=("start_line", "end_line"),
        options=(
            click.option(
                "--lines",
                metavar="A-B",
                help="Only the note's passages in these lines (a long note's part).",
            ),
        ),
        shape=_lines,
    ),
    Face("mentions", _show_mentions, NOTE_USAGE, argument="path"),
    Face("backlinks", _show_backlinks, NOTE_USAGE, argument="path"),
    Face(
        "note",
        _show_note,
        NOTE_USAGE + " With --text only the text is printed, its line range (a PDF's pages) "
        "and their total on stderr; --json prints the whole answer. Lines or pages asked for "
        "imply --text.",
        argument="path",
        shape=_text_of_a_range,
    ),
    Face(
        "outline",
        _show_outline,
        NOTE_USAGE + "\n\n\b\nA section is then read by its lines:\n"
        "  vaultd note NOTE --text --start-line A --end-line B",
        argument="path",
    ),
    Face(
        "tags",
        _show_tags,
        'PREFIX ("project") is the tag whose own and nested tags are listed.',
        argument="prefix",
    ),
    Face("recent", _show_recent),
    Face(
        "export",
        usage="With a daemon running the daemon exports (it owns the data directory); "
        "otherwise this command opens the index itself.",
    ),
)
