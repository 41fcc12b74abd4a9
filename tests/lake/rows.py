"""A view's rows from either engine, compared row for row (floats within 1e-9)."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

Rows = list[tuple[Any, ...]]


def comparable(engine_rows: Rows) -> Rows:
    """Rows in one order, whatever order each engine returned them in."""

    def key(value: Any) -> tuple[int, Any]:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return (0, "")
        if isinstance(value, bool):
            return (1, int(value))
        if isinstance(value, int | float | Decimal):
            return (2, round(float(value), 6))
        return (3, str(value))

    return sorted(engine_rows, key=lambda row: tuple(key(v) for v in row))


def _fields(value: Any) -> Any:
    """A struct as a dict, whichever engine gave it (DuckDB: dict; Spark: Row)."""
    as_dict = getattr(value, "asDict", None)
    return as_dict() if as_dict is not None else value


def same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a, b = _fields(a), _fields(b)
    if isinstance(a, dict) and isinstance(b, dict):  # a struct: field by field
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):  # a list: in order
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, int | float | Decimal) and isinstance(b, int | float | Decimal):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    return bool(a == b)


def duck_rows(con: Any, name: str) -> tuple[list[str], Rows]:
    """A DuckDB view's columns and rows, timestamps as epoch microseconds."""
    described = con.execute(f"DESCRIBE {name}").fetchall()
    columns = [
        f'epoch_us("{c}") AS "{c}"' if t.startswith("TIMESTAMP") else f'"{c}"'
        for c, t, *_ in described
    ]
    rows = con.execute(f"SELECT {', '.join(columns)} FROM {name}").fetchall()
    return [c for c, *_ in described], rows


def differences(name: str, ours: tuple[list[str], Rows], theirs: tuple[list[str], Rows]) -> str:
    """'' when both give the same columns and rows (in any order), else what differs."""
    (columns, rows), (their_columns, their_rows) = ours, theirs
    if columns != their_columns:
        return f"{name}: columns {columns} vs {their_columns}"
    if len(rows) != len(their_rows):
        return f"{name}: {len(rows)} rows vs {len(their_rows)}"
    for row, their_row in zip(comparable(rows), comparable(their_rows), strict=True):
        differing = [
            (column, a, b)
            for column, a, b in zip(columns, row, their_row, strict=True)
            if not same(a, b)
        ]
        if differing:
            return f"{name}: {differing}"
    return ""
