"""A benchmark's recorded result: one table of docs/benchmarks.md and how it was measured.

Each result is `bench/results/<name>.json`, written by the benchmark that measured it
(`--record NAME`) and rendered into the doc by `python -m bench.lib.tables`. Cells are kept as
the doc shows them (units, thousands separators, bold), since the table is what a reader
compares and a benchmark decides how its figures read.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, cast, get_args

from bench.lib.machine import machine
from bench.lib.paths import REPO

RESULTS = REPO / "bench" / "results"

#: What a recorded result must say of its run.
MEASURED = ("command", "date", "machine", "load")
#: A day, or a day and the UTC time (or span of times) of the run, as `record` writes it.
DATE = re.compile(r"\d{4}-\d{2}-\d{2}( \d{2}:\d{2}([-–]\d{2}:\d{2})? UTC)?")

#: A column's alignment, as markdown's delimiter row says it: `---`, `:---`, `---:`, `:---:`.
Align = Literal["none", "left", "right", "center"]
ALIGNS: tuple[Align, ...] = get_args(Align)


@dataclass(frozen=True, slots=True)
class Result:
    columns: tuple[str, ...]
    align: tuple[Align, ...]
    rows: tuple[tuple[str, ...], ...]
    #: The exact command line, the date (ISO, UTC), the machine and the load average as
    #: measured; a result converted from a hand-written table has what its prose said, and
    #: "not recorded when measured" where it said nothing. None only in a table not recorded.
    command: str | None = None
    date: str | None = None
    machine: str | None = None
    load: str | None = None
    notes: str | None = None

    def __post_init__(self) -> None:
        if len(self.align) != len(self.columns):
            raise ValueError(f"{len(self.columns)} columns but {len(self.align)} alignments")
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"a row of {len(row)} cells in a table of {len(self.columns)}")
        if any(align not in ALIGNS for align in self.align):
            raise ValueError(f"alignments are {ALIGNS}, not {self.align}")

    def to_json(self) -> str:
        """JSON with one row a line, so that a re-measured figure is a one-line diff."""

        def dump(value: object) -> str:
            return json.dumps(value, ensure_ascii=False)

        fields = {
            "command": self.command,
            "date": self.date,
            "machine": self.machine,
            "load": self.load,
            "notes": self.notes,
            "columns": list(self.columns),
            "align": list(self.align),
        }
        lines = [f"  {dump(key)}: {dump(value)}," for key, value in fields.items()]
        rows = ",\n".join(f"    {dump(list(row))}" for row in self.rows)
        return "{\n" + "\n".join(lines) + f'\n  "rows": [\n{rows}\n  ]\n}}\n'

    @classmethod
    def from_json(cls, text: str) -> Result:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("a result is a JSON object")

        def text_or_none(key: str) -> str | None:
            value = data.get(key)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{key} is a string or null")
            return value

        def strings(value: object, what: str) -> tuple[str, ...]:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{what} is a list of strings")
            return tuple(value)

        rows = data.get("rows")
        if not isinstance(rows, list):
            raise ValueError("rows is a list of lists of strings")
        # A figure is comparable only with how it was measured, so a result that does not say
        # is refused rather than shown; a gap in the history is written out, not left empty.
        for key in MEASURED:
            if not text_or_none(key):
                raise ValueError(f"{key} is missing (write 'not recorded when measured' if so)")
        if not DATE.fullmatch(data["date"]):
            raise ValueError(f"date {data['date']!r} is not YYYY-MM-DD [HH:MM[-HH:MM] UTC]")
        return cls(
            columns=strings(data.get("columns"), "columns"),
            align=cast(tuple[Align, ...], strings(data.get("align"), "align")),
            rows=tuple(strings(row, "a row") for row in rows),
            command=text_or_none("command"),
            date=text_or_none("date"),
            machine=text_or_none("machine"),
            load=text_or_none("load"),
            notes=text_or_none("notes"),
        )


def add_record_option(parser: argparse.ArgumentParser) -> None:
    """`--record NAME`: a run is recorded only when asked, under a name the doc's marker uses,
    so a trial run never overwrites the result a table shows."""
    parser.add_argument(
        "--record",
        metavar="NAME",
        help="also write the table as bench/results/NAME.json (see docs/benchmarks.md)",
    )


def path_of(name: str, results: Path = RESULTS) -> Path:
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"not a result name: {name!r}")
    return results / f"{name}.json"


def load(name: str, results: Path = RESULTS) -> Result:
    return Result.from_json(path_of(name, results).read_text(encoding="utf-8"))


def save(name: str, result: Result, results: Path = RESULTS) -> Path:
    path = path_of(name, results)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.to_json(), encoding="utf-8")
    return path


def table(
    columns: Sequence[str], rows: Sequence[Sequence[str]], align: Sequence[Align] | None = None
) -> Result:
    """A table with nothing said of its run. Alignment defaults to the doc's usual: the first
    column as is, the figures to the right."""
    first: Align = "none"
    figures: Align = "right"
    return Result(
        columns=tuple(columns),
        align=tuple(align) if align is not None else (first,) + (figures,) * (len(columns) - 1),
        rows=tuple(tuple(row) for row in rows),
    )


def record(
    name: str | None,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    align: Sequence[Align] | None = None,
    notes: str | None = None,
    results: Path = RESULTS,
) -> Path | None:
    """Write the table a benchmark just measured as result `name`, with this run's command
    line, date, machine and load average; nothing when `name` is None (no `--record`)."""
    if name is None:
        return None
    result = replace(
        table(columns, rows, align),
        command=command_line(),
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        machine=machine(),
        load=" ".join(f"{x:.2f}" for x in os.getloadavg()),
        notes=notes,
    )
    path = save(name, result, results)
    print(f"recorded {path}; render it with python -m bench.lib.tables", file=sys.stderr)
    return path


def report_rows(report: Mapping[str, object], prefix: str = "") -> list[list[str]]:
    """A JSON report's figures, a row each (`key.subkey`, value): the table of a benchmark that
    prints JSON rather than a table. Long lists (timelines, samples) stay in the JSON it prints."""
    rows: list[list[str]] = []
    for key, value in report.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            rows += report_rows(value, f"{name}.")
        elif isinstance(value, list | tuple):
            if len(value) <= 8 and not any(isinstance(v, Mapping | list | tuple) for v in value):
                rows.append([name, ", ".join(cell(v) for v in value)])
        else:
            rows.append([name, cell(value)])
    return rows


def cell(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return f"{value:,}"
    return str(value)


def command_line() -> str:
    """This process's command line as it was typed: `python -m bench.x.y ...`."""
    module = sys.modules["__main__"].__spec__
    head = ["python", "-m", module.name] if module is not None else ["python", sys.argv[0]]
    return shlex.join(head + sys.argv[1:])
