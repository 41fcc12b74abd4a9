"""Terminal tables that fit: a table when it fits, else grouped rows or one record per block.

Rich squeezes a table that is wider than the terminal: numeric columns lose
digits (``1274`` printed as ``12``) and text columns shrink to nothing. Here a
table is printed only at its natural width; when that is wider than the
console, :func:`print_frame` groups rows under headings (``agent · model``)
and, if a group still does not fit, prints each row as a block of
``column: value`` lines, saying so. Every cell from the ledger is plain text:
rich markup in it is not interpreted, and control characters (an ESC sequence
in a model name) and bidi formatting (U+202E in an upstream name) are shown
escaped (:mod:`ledger.shown`), so a row cannot restyle or clear the terminal,
nor show its text, or the columns after it, reversed.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Final

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
from rich import box
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ledger.analytics.read.verdict_words import KIND_WORDS
from ledger.shown import lines, one_line

RATE_SUFFIXES: Final = ("rate", "share", "stickiness")
#: One spelling of a boolean in every table and CSV: SQL's and JSON's.
BOOLEAN: Final = {True: "true", False: "false"}
#: Significant digits of a float in a table (CSV and JSON give every digit).
FLOAT_DIGITS: Final = 6

#: Verdicts in words, as people say them.
#: The verdict kinds in words (ledger.analytics.read.verdict_words, where the verdict's words live).
VERDICT_WORDS: Final[dict[str, str]] = {str(k): v for k, v in KIND_WORDS.items()}
VERDICT_STYLE: Final[dict[str, str]] = {
    "warranted": "bold red",
    "not_warranted": "green",
    "insufficient_data": "yellow",
    "does_not_apply": "dim",
}


#: Piped with no terminal anywhere: no width to honour, so tables keep their natural width.
UNBOUNDED: Final = 100_000


def stdout_console() -> Console:
    """stdout's console for tables and lines: the terminal's width (``COLUMNS`` when set);
    piped into a pager from a terminal (``ledger sql … | less``), that terminal's width,
    read from stderr; with no terminal at all (a file, cron, CI), lines are never wrapped
    or padded and tables are as wide as their content."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit():
        return Console(highlight=False)
    try:
        return Console(width=os.get_terminal_size(sys.stderr.fileno()).columns, highlight=False)
    except (OSError, ValueError):
        return Console(width=UNBOUNDED, soft_wrap=True, highlight=False)


def safe(value: object) -> str:
    """``value`` as one printable line: control characters as ``\\x1b``-style escapes,
    bidi formatting as ``\\u202e``-style ones."""
    return one_line(value)


def safe_lines(text: str) -> str:
    """:func:`safe` for many lines: every such character escaped but the line break."""
    return lines(text)


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 row``, ``2 rows``, ``1,234 rows``: a count and its noun, agreeing."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def cell(value: Any, column: str) -> str:
    """A value as the tables show it: money with 2 decimals (4 below $1), rates in %."""
    if value is None or value is pd.NaT or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool | np.bool_):
        return BOOLEAN[bool(value)]
    if isinstance(value, Decimal):
        return f"${value:,.2f}" if abs(value) >= 1 else f"${value:,.4f}"
    if isinstance(value, float):
        if column.endswith(RATE_SUFFIXES):
            return f"{100 * value:.1f}%"
        return f"{value:,.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if column == "verdict":
        return VERDICT_WORDS.get(str(value), safe(value))
    return safe(value)


def short_float(value: float) -> str:
    """``value`` to :data:`FLOAT_DIGITS` significant digits, positional and grouped:
    ``0.333333``, ``0.830880``, ``1,234,568``, ``0.000123457``; a whole number without
    its zeros (``3``, ``0``). Trailing zeros stay otherwise, so a column of rates lines up."""
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    decimals = max(0, FLOAT_DIGITS - 1 - math.floor(math.log10(abs(value))))
    if value.is_integer():
        return f"{value:,.0f}"
    return f"{value:,.{decimals}f}"


def exact_cell(value: Any, column: str) -> str:
    """A value as ad hoc SQL shows it: as stored, nothing scaled (a rate stays a
    fraction), money as plain digits, integers grouped; a float to
    :data:`FLOAT_DIGITS` significant digits (``--format csv|json`` keep every digit)."""
    if isinstance(value, float | np.floating) and not math.isnan(value):
        return short_float(float(value))
    if isinstance(value, Decimal):
        return format(value.normalize(), "f") if value else "0"
    if column == "verdict":
        return safe(value)
    return cell(value, column)


#: How a table shows a value: :func:`cell` (reports) or :func:`exact_cell` (``ledger sql``).
CellFormat = Callable[[Any, str], str]


def _styled(text: str, column: str, raw: Any) -> Text:
    style = VERDICT_STYLE.get(str(raw), "") if column == "verdict" else ""
    return Text(text, style=style)  # Text: markup in ledger strings stays literal


def _numeric(frame: pd.DataFrame, column: str) -> bool:
    dtype = frame[column].dtype
    return bool(pd.api.types.is_numeric_dtype(dtype)) and not pd.api.types.is_bool_dtype(dtype)


def house_table(title: str | None) -> Table:
    """The one table style of every command: bold headers over a light rule, no outer
    edge (two columns of borders fewer than rich's default box), the title on the left."""
    return Table(
        title=title,
        title_justify="left",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),
    )


def frame_table(
    title: str | None,
    frame: pd.DataFrame,
    columns: Sequence[str] | None = None,
    headers: Mapping[str, str] | None = None,
    show: CellFormat = cell,
) -> Table:
    """A rich table of ``frame`` (or of its ``columns``) at its natural width, numbers
    right-aligned; ``headers`` relabels columns. Cells never wrap: see :func:`fits`."""
    shown = list(columns) if columns is not None else list(frame.columns)
    table = house_table(title)
    for name in shown:
        label = (headers or {}).get(name, name)
        right = _numeric(frame, name) or name.endswith("_usd")
        # Text, not str: a str header is parsed for markup and :emoji: codes.
        table.add_column(Text(safe(label)), justify="right" if right else "left", no_wrap=True)
    for row in frame[shown].itertuples(index=False):
        table.add_row(*(_styled(show(v, c), c, v) for v, c in zip(row, shown, strict=True)))
    return table


def natural_width(console: Console, table: Table) -> int:
    """The width ``table`` needs with no cell wrapped or cut."""
    options = console.options.update_width(10_000)
    return Measurement.get(console, options, table).maximum


def fits(console: Console, table: Table) -> bool:
    return natural_width(console, table) <= console.width


def records(
    frame: pd.DataFrame,
    columns: Sequence[str],
    headers: Mapping[str, str] | None = None,
    show: CellFormat = cell,
) -> RenderableType:
    """Each row as a block of ``column: value`` lines (values wrap, never cut)."""
    labels = [safe((headers or {}).get(c, c)) for c in columns]
    pad = max((len(label) for label in labels), default=0)
    blocks: list[RenderableType] = []
    for number, row in enumerate(frame[list(columns)].itertuples(index=False), start=1):
        blocks.append(Text(f"-- record {number} --", style="dim"))
        for label, column, value in zip(labels, columns, row, strict=True):
            line = Text(f"{label:<{pad}} : ", style="bold")
            line.append_text(_styled(show(value, column), column, value))
            blocks.append(line)
    return Group(*blocks)


def print_frame(
    console: Console,
    title: str,
    frame: pd.DataFrame,
    columns: Sequence[str],
    *,
    headers: Mapping[str, str] | None = None,
    group_by: Sequence[str] = (),
) -> None:
    """``frame`` as a table if it fits ``console``; else grouped under ``group_by`` headings,
    each group a table if it fits, else records. Never squeezes or cuts a value."""
    console.print()
    if frame.empty:
        console.print(Text.assemble((title, "bold"), ": no rows yet"))
        return
    table = frame_table(title, frame, columns, headers)
    if fits(console, table):
        console.print(table)
        return
    console.print(Text(title, style="bold"))
    if not group_by:
        console.print(Text("(too wide for this terminal: one record per block)", style="dim"))
        console.print(records(frame, columns, headers))
        return
    rest = [c for c in columns if c not in group_by]
    for key, part in frame.groupby(list(group_by), dropna=False, sort=False):
        values = key if isinstance(key, tuple) else (key,)
        heading = " · ".join(cell(v, c) for v, c in zip(values, group_by, strict=True))
        console.print(Text(heading, style="bold cyan"))
        sub = frame_table(None, part, rest, headers)
        console.print(sub if fits(console, sub) else records(part, rest, headers))
