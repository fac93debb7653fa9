"""docs/benchmarks.md's tables, rendered from the recorded results in bench/results/.

In the doc a table is the marker `<!-- table: NAME -->` on the line above it, at the table's
own indentation; the table runs to its last `|` line and is rendered from
`bench/results/NAME.json`. The prose around it stays hand-written.

    python -m bench.lib.tables            # rewrite the doc's tables from the results
    python -m bench.lib.tables --check    # exit 1 and name what is stale or unmatched
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.lib.paths import REPO
from bench.lib.results import RESULTS, Align, Result, path_of, table

DOC = REPO / "docs" / "benchmarks.md"
MARKER = re.compile(r"^(?P<indent>\s*)<!-- table: (?P<name>\S+) -->$")
DELIMITERS = {"none": "---", "left": ":---", "right": "---:", "center": ":---:"}


def render_row(cells: Sequence[str]) -> str:
    # An empty cell is one space, as the tables were written by hand; a pipe in a cell escaped.
    escaped = (c.replace("|", r"\|") for c in cells)
    return "|" + "|".join(f" {c} " if c else " " for c in escaped) + "|"


def render(result: Result, indent: str = "") -> list[str]:
    lines = [render_row(result.columns)]
    lines.append("|" + "|".join(DELIMITERS[a] for a in result.align) + "|")
    lines += [render_row(row) for row in result.rows]
    return [indent + line for line in lines]


def markdown(
    columns: Sequence[str], rows: Sequence[Sequence[str]], align: Sequence[Align] | None = None
) -> str:
    """The table as the doc would show it, for a benchmark to print."""
    return "\n".join(render(table(columns, rows, align)))


@dataclass(frozen=True, slots=True)
class Marked:
    """A marked table: the marker's line index, the table's lines after it, its indentation."""

    name: str
    marker: int
    end: int
    indent: str


@dataclass(frozen=True, slots=True)
class Scan:
    marked: tuple[Marked, ...]
    #: The 1-based first line of each table that has no marker.
    unmarked: tuple[int, ...]


def is_table_line(line: str) -> bool:
    return line.lstrip().startswith("|")


def scan(lines: Sequence[str]) -> Scan:
    marked: list[Marked] = []
    unmarked: list[int] = []
    fence: str | None = None
    i = 0
    while i < len(lines):
        stripped = lines[i].lstrip()
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            i += 1
            continue
        if stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            i += 1
            continue
        match = MARKER.match(lines[i])
        if match is not None or is_table_line(lines[i]):
            start = i + 1 if match is not None else i
            end = start
            while end < len(lines) and is_table_line(lines[end]):
                end += 1
            if match is not None:
                marked.append(Marked(match["name"], i, end, match["indent"]))
            else:
                unmarked.append(i + 1)
            i = max(end, i + 1)
            continue
        i += 1
    return Scan(tuple(marked), tuple(unmarked))


def read_result(name: str, results: Path) -> Result | str:
    """The result, or why it cannot be had."""
    path = path_of(name, results)
    try:
        return Result.from_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"table {name!r}: no {path.name} in {results}"
    except ValueError as exc:
        return f"table {name!r}: {path.name} is not a result: {exc}"


@dataclass(frozen=True, slots=True)
class Rendered:
    text: str
    #: Tables with no marker, markers with no result or used twice, results with no table.
    problems: tuple[str, ...]
    #: The marked tables that differ from their results.
    stale: tuple[str, ...]


def regenerate(text: str, results: Path = RESULTS) -> Rendered:
    """The doc with every marked table rendered from its result, and what is wrong with it."""
    lines = text.split("\n")
    found = scan(lines)
    problems = [f"line {n}: a table with no `<!-- table: NAME -->` marker" for n in found.unmarked]
    names = [m.name for m in found.marked]
    problems += [
        f"table {n!r} is marked twice" for n in sorted({n for n in names if names.count(n) > 1})
    ]
    out: list[str] = []
    stale: list[str] = []
    done = 0
    for marked in found.marked:
        out += lines[done : marked.marker + 1]
        current = lines[marked.marker + 1 : marked.end]
        result = read_result(marked.name, results)
        if isinstance(result, str):
            problems.append(result)
            out += current
        else:
            table = render(result, marked.indent)
            if table != current:
                stale.append(marked.name)
            out += table
        done = marked.end
    out += lines[done:]
    orphans = sorted(p.stem for p in results.glob("*.json") if p.stem not in names)
    problems += [f"{results.name}/{n}.json: no table in the doc is marked {n!r}" for n in orphans]
    return Rendered("\n".join(out), tuple(problems), tuple(stale))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    text = args.doc.read_text(encoding="utf-8")
    rendered = regenerate(text, args.results)
    problems = list(rendered.problems)
    if args.check:
        problems += [
            f"table {n!r} is stale: python -m bench.lib.tables rewrites it" for n in rendered.stale
        ]
    elif rendered.text != text:
        args.doc.write_text(rendered.text, encoding="utf-8")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
