"""Frontmatter conditions (`where`), and the SQL that tests them against the notes table.

A `Condition` (defined with the query language, vaultd.query, which parses a query's `where`
or a `--where` flag into them) is what search hands the manifest; `condition_sql` compiles one
into a clause over SQLite's JSON functions on `notes.frontmatter`, with its parameters.
Nothing here opens the database.
"""

from __future__ import annotations

from typing import Any

from vaultd.query import Condition, Scalar

_RANGE_SQL = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


def _number_text(value: float) -> str:
    """How YAML would have written a number as text: 3, not 3.0."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _equals_sql(value: Scalar, val: str, kind: str) -> tuple[str, list[Any]]:
    if value is None:
        return f"{kind} = 'null'", []
    if isinstance(value, bool):
        return f"{kind} = '{'true' if value else 'false'}'", []
    if isinstance(value, int | float):
        return (
            f"(({kind} IN ('integer', 'real') AND {val} = ?) OR ({kind} = 'text' AND {val} = ?))",
            [value, _number_text(value)],
        )
    return (
        f"(({kind} = 'text' AND {val} = ? COLLATE NOCASE) "
        f"OR ({kind} IN ('integer', 'real') AND CAST({val} AS TEXT) = ?))",
        [value, value],
    )


def _test_sql(condition: Condition, val: str, kind: str) -> tuple[str, list[Any]]:
    op, value = condition.op, condition.value
    if op == "eq":
        return _equals_sql(value, val, kind)  # type: ignore[arg-type]
    if op == "in":
        parts = [_equals_sql(v, val, kind) for v in value]  # type: ignore[union-attr]
        if not parts:
            return "0", []
        return "(" + " OR ".join(p for p, _ in parts) + ")", [x for _, ps in parts for x in ps]
    symbol = _RANGE_SQL[op]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"({kind} IN ('integer', 'real') AND {val} {symbol} ?)", [value]
    bound = str(value)
    if len(bound) == 10:  # a date: compare the date a value falls on
        return f"({kind} = 'text' AND date({val}) {symbol} ?)", [bound]
    return f"({kind} = 'text' AND julianday({val}) {symbol} julianday(?))", [bound]


def condition_sql(condition: Condition) -> tuple[str, list[Any]]:
    """True when the field's value, or any item of a list value, passes the test."""
    test, params = _test_sql(condition, "v.value", "v.type")
    item_test, item_params = _test_sql(condition, "e.value", "e.type")
    sql = (
        "EXISTS (SELECT 1 FROM json_each(notes.frontmatter) AS v WHERE v.key = ? AND "
        f"({test} OR (v.type = 'array' AND EXISTS "
        f"(SELECT 1 FROM json_each(v.value) AS e WHERE {item_test}))))"
    )
    return sql, [condition.field, *params, *item_params]
