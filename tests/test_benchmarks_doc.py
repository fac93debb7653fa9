"""docs/benchmarks.md's tables are those of the recorded results in bench/results/: each one
marked and rendered from its JSON, no result without its table, no table written by hand."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bench.lib import tables
from bench.lib.machine import machine
from bench.lib.results import RESULTS, Result, load, record, report_rows, save

DOC = tables.DOC


def test_every_table_of_the_doc_is_rendered_from_its_result() -> None:
    rendered = tables.regenerate(DOC.read_text(encoding="utf-8"))
    assert not rendered.problems and not rendered.stale, (
        f"{rendered.problems}, stale: {rendered.stale}; "
        "record results with --record NAME and run python -m bench.lib.tables"
    )


def test_every_result_reads_back_as_written() -> None:
    for path in sorted(RESULTS.glob("*.json")):
        result = load(path.stem)
        assert result.to_json() == path.read_text(encoding="utf-8"), path.name


# The check itself, on copies: each way the doc and the results can disagree is named.


def copies(tmp_path: Path) -> tuple[Path, Path]:
    doc, results = tmp_path / "benchmarks.md", tmp_path / "results"
    shutil.copy(DOC, doc)
    shutil.copytree(RESULTS, results)
    return doc, results


def check(doc: Path, results: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = tables.main(["--check", "--doc", str(doc), "--results", str(results)])
    return code, capsys.readouterr().err


def test_the_copies_pass_the_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check(*copies(tmp_path), capsys) == (0, "")


def test_a_figure_changed_in_the_doc_is_stale_and_rendering_restores_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc, results = copies(tmp_path)
    original = doc.read_text(encoding="utf-8")
    doc.write_text(original.replace("| 6,571 | 0 | 26,481 |", "| 6,572 | 0 | 26,481 |"))
    code, err = check(doc, results, capsys)
    assert code == 1 and "'parse-chunk' is stale" in err
    assert tables.main(["--doc", str(doc), "--results", str(results)]) == 0
    assert doc.read_text(encoding="utf-8") == original


def test_a_result_changed_makes_its_table_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc, results = copies(tmp_path)
    result = load("parse-chunk", results)
    save("parse-chunk", replace(result, columns=("x", *result.columns[1:])), results)
    code, err = check(doc, results, capsys)
    assert code == 1 and "'parse-chunk' is stale" in err


def test_a_result_with_no_table_and_a_table_with_no_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc, results = copies(tmp_path)
    (results / "parse-chunk.json").rename(results / "parse-chunk-again.json")
    code, err = check(doc, results, capsys)
    assert code == 1
    assert "table 'parse-chunk': no parse-chunk.json" in err
    assert "parse-chunk-again.json: no table in the doc" in err


@pytest.mark.parametrize(
    ("field", "value", "refused"),
    [
        ("command", None, "command is missing"),
        ("date", "", "date is missing"),
        ("machine", None, "machine is missing"),
        ("load", "", "load is missing"),
        ("date", "2026-12-03, 16:06–16:17 UTC", "is not YYYY-MM-DD"),
        ("date", "2026-12-04 from 00:04 UTC", "is not YYYY-MM-DD"),
    ],
)
def test_a_result_that_does_not_say_how_it_was_measured_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: str | None, refused: str
) -> None:
    doc, results = copies(tmp_path)
    path = results / "parse-chunk.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps(data | {field: value}), encoding="utf-8")
    code, err = check(doc, results, capsys)
    assert code == 1 and "'parse-chunk': parse-chunk.json is not a result" in err and refused in err


def test_a_table_written_by_hand_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc, results = copies(tmp_path)
    text = doc.read_text(encoding="utf-8")
    # Unmarked in the prose, and in a list item; a table in a code block is not the doc's.
    doc.write_text(
        text
        + "\n| a | b |\n|---|---:|\n| 1 | 2 |\n"
        + "\n- item\n\n  | a |\n  |---|\n\n```md\n| in code |\n|---|\n```\n"
    )
    lines = len(text.split("\n"))
    code, err = check(doc, results, capsys)
    assert code == 1
    assert f"line {lines + 1}: a table with no" in err
    assert f"line {lines + 7}: a table with no" in err
    assert "in code" not in err and err.count("a table with no") == 2


def test_a_marker_used_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc, results = copies(tmp_path)
    text = doc.read_text(encoding="utf-8")
    marked = text[text.index("<!-- table: parse-chunk -->") :].split("\n\n", 1)[0]
    doc.write_text(text + "\n" + marked + "\n")
    code, err = check(doc, results, capsys)
    assert code == 1 and "'parse-chunk' is marked twice" in err


def test_rendering_keeps_indentation_alignment_and_empty_cells() -> None:
    result = Result(
        columns=("", "a|b", "c"),
        align=("none", "right", "center"),
        rows=(("x", "", "**1**"),),
    )
    assert tables.render(result, "  ") == [
        "  | | a\\|b | c |",
        "  |---|---:|:---:|",
        "  | x | | **1** |",
    ]
    assert tables.markdown(["a", "b"], [["x", "1"]]) == "| a | b |\n|---|---:|\n| x | 1 |"


def test_a_recorded_run_says_how_it_was_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["ocr_speed.py", "--limit", "2", "--record", "ocr-x"])
    assert record(None, ["image", "s"], [["a.png", "1.00"]], results=tmp_path) is None
    path = record("ocr-x", ["image", "s"], [["a.png", "1.00"]], results=tmp_path)
    assert path == tmp_path / "ocr-x.json"
    result = Result.from_json(path.read_text(encoding="utf-8"))
    assert result.command is not None and result.command.endswith("--limit 2 --record ocr-x")
    assert result.machine == machine() and result.date and result.load
    assert result.align == ("none", "right") and result.rows == (("a.png", "1.00"),)


def test_a_json_report_is_tabled_a_figure_a_row() -> None:
    report = {"first_index_s": 2953.9, "restart": {"reads": 0, "ok": True, "at": None}}
    report |= {"load": [1.5, 2], "timeline": [[0, 700]] * 40, "tree": "main"}
    assert report_rows(report) == [
        ["first_index_s", "2,953.9"],
        ["restart.reads", "0"],
        ["restart.ok", "true"],
        ["restart.at", "null"],
        ["load", "1.5, 2"],
        ["tree", "main"],
    ]
