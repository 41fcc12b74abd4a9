"""``ledger sql "QUERY"``: ad hoc DuckDB SQL over ``token_usage`` and the views.

The query reads only (:mod:`ledger.analytics.read.readonly`): a statement that
would change the analytics copy is refused with exit status 2, before the
ledger is even synced.
"""

from __future__ import annotations

import json
import math
import sys
from decimal import Decimal
from typing import Any

import click
import duckdb
import numpy as np
import pandas as pd  # type: ignore[import-untyped]
from rich.console import Console

from ledger.analytics.read.readonly import check_read_only
from ledger.cli.report import open_analytics
from ledger.cli.tables import (
    BOOLEAN,
    counted,
    exact_cell,
    fits,
    frame_table,
    records,
    safe_lines,
    stdout_console,
)
from ledger.shown import json_escaped


def _plain(value: Any) -> Any:
    """A JSON value: money as exact decimal text, times as ISO 8601, NaN as null,
    lists and structs (DuckDB LIST/STRUCT columns) element by element."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [_plain(v) for v in value]
    if value is None or value is pd.NaT or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def to_json(frame: pd.DataFrame) -> str:
    """The rows as JSON text: non-ASCII text as written, but no character that acts
    on a terminal (C1 controls, bidi overrides: see :func:`~ledger.shown.json_escaped`);
    piped or shown, a parser gets the strings as stored."""
    records = [
        {col: _plain(v) for col, v in zip(frame.columns, row, strict=True)}
        for row in frame.itertuples(index=False)
    ]
    return json_escaped(json.dumps(records, ensure_ascii=False, indent=1, default=str))


@click.command()
@click.argument("query")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
    help="Output format.",
)
def sql(query: str, fmt: str) -> None:
    """Run QUERY (DuckDB SQL, read-only) over token_usage and the analytics views.

    Statements that write (DELETE, UPDATE, CREATE, SET, COPY, ATTACH…) are
    refused, inside EXPLAIN too; no query reads or writes a file or loads an
    extension. Rows come in the query's ORDER BY, else sorted by every column (the
    same query, the same order). Tables give floats to 6 significant digits; csv and
    json every digit. Booleans are true/false in all three.
    Example: ledger sql "SELECT * FROM agent_stickiness WHERE key_sent"
    """
    try:
        check_read_only(query)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="QUERY") from None
    except duckdb.Error as exc:
        raise click.ClickException(f"query failed: {exc}") from None
    with open_analytics(Console(stderr=True)) as analytics:
        try:
            frame = analytics.sql(query)
        except duckdb.Error as exc:
            raise click.ClickException(f"query failed: {exc}") from None
    if not orders_rows(query):
        frame = stable_order(frame)
    if fmt == "csv":
        text = to_csv(frame)
        # piped, the CSV is the data as stored; on a terminal, an escape sequence in it
        # would be run, not shown
        sys.stdout.write(safe_lines(text) if sys.stdout.isatty() else text)
    elif fmt == "json":
        click.echo(to_json(frame))
    else:
        print_table(stdout_console(), frame)


def to_csv(frame: pd.DataFrame) -> str:
    """The rows as CSV, one line feed per record; a value holding a CR or LF quoted.

    Python's csv writer quotes only the characters of its line terminator: with
    ``\n``, a bare CR in a value went out unquoted and a reader took it for the end
    of the record. Written with ``\r\n`` (every CR and LF in a value is quoted),
    the records' own ``\r\n`` are outside quotes and become ``\n`` again."""
    text: str = plain_decimals(frame).to_csv(index=False, lineterminator="\r\n")
    parts = text.split('"')  # even places: outside quotes ("" inside one splits in pairs)
    parts[::2] = [part.replace("\r\n", "\n") for part in parts[::2]]
    return '"'.join(parts)


def plain_decimals(frame: pd.DataFrame) -> pd.DataFrame:
    """Money as positional digits (``str(Decimal)`` writes a zero cost as ``0E-10``), and
    booleans spelt as the tables and JSON spell them (pandas writes ``True``)."""
    return frame.map(_csv_value)


def _csv_value(value: Any) -> Any:
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bool | np.bool_):
        return BOOLEAN[bool(value)]
    return value


def orders_rows(query: str) -> bool:
    """Whether ``query``'s last statement orders its rows (a top-level ORDER BY). One
    DuckDB cannot serialize (EXPLAIN, PRAGMA, SHOW) counts as ordered: its rows are
    shown as DuckDB gives them."""
    with duckdb.connect() as con:
        row = con.execute("SELECT json_serialize_sql(?)", [query]).fetchone()
    tree = json.loads(row[0]) if row else {}
    if tree.get("error") or not tree.get("statements"):
        return True
    modifiers = tree["statements"][-1]["node"].get("modifiers", [])
    return any(m.get("type") == "ORDER_MODIFIER" for m in modifiers)


def stable_order(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows a query left unordered, sorted by every column in turn, so the same query
    prints the same order each time (a GROUP BY's order is its hash table's). Columns
    that cannot be compared (lists, structs, mixed types) leave the order as it came."""
    if frame.empty or len(frame.columns) == 0:
        return frame
    try:
        ordered = frame.sort_values(list(frame.columns), kind="stable", na_position="last")
    except (TypeError, ValueError):
        return frame
    return ordered.reset_index(drop=True)


def print_table(out: Console, frame: pd.DataFrame) -> None:
    """A table when it fits the terminal, else one record per block; nothing is cut, and
    only floats are rounded, to 6 significant digits (:func:`exact_cell`)."""
    title = counted(len(frame), "row")
    table = frame_table(title, frame, show=exact_cell)
    if fits(out, table):
        out.print(table)
        return
    out.print(f"{title} (wider than {out.width} columns: one record per block)", style="bold")
    out.print(records(frame, list(frame.columns), show=exact_cell))
