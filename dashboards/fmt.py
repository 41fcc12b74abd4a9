"""Formatting for people: labels, money in USD, rates in %, tables with a CSV download.

Money arrives as ``Decimal`` (exact, as in the ledger) and is only turned into
a float for display; the CSV download keeps the exact values. Column names
become human labels through :data:`LABELS` (tables, chart axes, legends and
tooltips alike). Strings from the ledger are data: :func:`plain` escapes them
for the few Streamlit calls that parse Markdown (metric labels, captions), and
:func:`printable` shows control characters and bidi formatting as escapes
everywhere else (U+202E would show ``\u202eAmazon Bedrock`` as "kcordeB
nozamA"): table cells, chart labels, legends and tooltips, filter options.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from decimal import Decimal
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from ledger.shown import escape, unsafe_pattern

RATE_SUFFIXES = ("rate", "share", "stickiness")
#: Unit prices keep more decimals than amounts.
UNIT_PRICE_MARKERS = ("per_mtok",)

#: Column name -> what people call it (tables, axes, legends, tooltips).
LABELS: dict[str, str] = {
    "actor_id": "agent",
    "requested_model": "model",
    "requested_provider": "requested provider",
    "responding_provider": "responding provider",
    "provider": "provider",
    "upstream": "upstream",
    "key_sent": "session key sent",
    "session key": "session key",
    "session_id": "session",
    "sessions": "sessions",
    "calls": "calls",
    "attempts": "attempts",
    "attempt": "attempt",
    "transitions": "transitions",
    "window_transitions": "transitions within the window",
    "switches": "switches",
    "idle_releases": "idle releases",
    "stickiness": "stickiness",
    "pinned_session_share": "sessions on one upstream",
    "avg_distinct_upstreams": "upstreams per session",
    "distinct_upstreams": "upstreams",
    "input_tokens": "input tokens",
    "output_tokens": "output tokens",
    "cache_read_tokens": "cache-read tokens",
    "cache_write_tokens": "cache-write tokens",
    "token_hit_rate": "token hit rate",
    "call_hit_rate": "call hit rate",
    "hit_calls": "calls reading the cache",
    "response_cache_hits": "response-cache hits",
    "response_cache_hit": "from the response cache",
    "fallback_calls": "fallback calls",
    "fell_back": "fell back",
    "failed_calls": "failed calls",
    "failed_attempts": "failed attempts",
    "cost_usd": "cost",
    "spend_usd": "spend",
    "error_rate": "error rate",
    "errors": "errors",
    "p50_latency_ms": "p50 latency",
    "p95_latency_ms": "p95 latency",
    "latency_ms": "latency",
    "cost_per_mtok_input_usd": "cost per M input tokens",
    "cost_per_mtok_input": "cost per M input tokens",
    "sessions_pinned": "sessions pinned",
    "started_at": "started (UTC)",
    "status": "status",
    "error_type": "error",
    "http_status": "HTTP status",
    "bucket": "time (UTC)",
    "idle_gap": "idle gap",
    "gap_s": "gap (s)",
    "move": "move",
    "previous_upstream": "previous upstream",
    "day": "day (UTC)",
    "failed_attempts_cost_usd": "failed-attempt cost",
    "unknown_cost_rows": "rows of unknown cost",
    "limit_usd": "limit",
    "spent_usd": "spent",
    "projected_usd": "projected",
    "used_share": "share of the limit",
}

#: Controls but tab and line feed (a widget shows those as such), bidi formatting.
_CONTROL = unsafe_pattern(tab=False, newline=False)


def label(column: str) -> str:
    """The human label of a column (``actor_id`` -> ``agent``)."""
    return LABELS.get(column, column.replace("_", " "))


def plain(value: object) -> str:
    """Ledger text as a Markdown code span: shown literally wherever Streamlit parses
    Markdown (headers, bold labels, help tooltips); control characters as ``\\x1b``.

    Escaping is not enough: GitHub-flavoured autolinks turn the text ``http://…``
    into a link however it is escaped. Inside a code span nothing is parsed: no
    link, image, HTML, emphasis or ``:red[…]`` directive. The fence is one backtick
    longer than the longest run of backticks in the text (CommonMark)."""
    text = printable(value).replace("\n", " ")
    runs = [len(run) for run in re.findall(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    return f"{fence} {text} {fence}"


def printable(value: object) -> str:
    """Ledger text for plain-text widgets: control characters shown as ``\\x1b``,
    bidi formatting as ``\\u202e``."""
    return _CONTROL.sub(escape, str(value))


def printable_text(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy whose text cells show control characters escaped (chart labels, legends)."""
    shown = frame.copy()
    for column in shown.columns:
        if shown[column].dtype == object or pd.api.types.is_string_dtype(shown[column]):
            shown[column] = shown[column].map(lambda v: printable(v) if isinstance(v, str) else v)
    return shown


def missing(value: Any) -> bool:
    if value is None or value is pd.NaT:
        return True
    return isinstance(value, float) and math.isnan(value)


def text(value: object) -> str:
    """A label, or ``–`` when there is none."""
    return "–" if missing(value) else str(value)


def money(value: Decimal | float | None) -> str:
    """``$1,234.56``; sub-dollar amounts keep four decimals; unknown cost says so."""
    if missing(value):
        return "unknown"
    amount = Decimal(str(value)) if not isinstance(value, Decimal) else value
    sign = "-" if amount < 0 else ""
    amount = abs(amount)
    return f"{sign}${amount:,.2f}" if amount >= 1 else f"{sign}${amount:,.4f}"


def dollars(value: Decimal | float | None) -> str:
    """``$1,234.56`` always with two decimals (amounts in headlines); ``unknown`` if unknown."""
    if missing(value):
        return "unknown"
    amount = Decimal(str(value)) if not isinstance(value, Decimal) else value
    return f"-${abs(amount):,.2f}" if amount < 0 else f"${amount:,.2f}"


def rate(value: float | None) -> str:
    """A share as a percentage with one decimal; ``–`` when undefined."""
    if missing(value):
        return "–"
    return f"{100 * float(value):.1f}%"  # type: ignore[arg-type]


def count(value: int | None) -> str:
    return "–" if missing(value) else f"{int(value):,}"  # type: ignore[arg-type]


def is_money(column: str) -> bool:
    return column.endswith("_usd")


def is_rate(column: str) -> bool:
    return column.endswith(RATE_SUFFIXES)


def for_display(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy for ``st.dataframe``: money as floats, rates as percentages."""
    shown = frame.copy()
    for column in shown.columns:
        if is_money(column) or column.endswith(UNIT_PRICE_MARKERS):
            shown[column] = pd.to_numeric(
                shown[column].map(lambda v: None if missing(v) else float(v)), errors="coerce"
            )
        elif is_rate(column):
            shown[column] = pd.to_numeric(shown[column], errors="coerce") * 100
        elif shown[column].dtype == object or pd.api.types.is_string_dtype(shown[column]):
            shown[column] = shown[column].map(
                lambda v: v if not isinstance(v, str) else printable(v)
            )
    return shown


def column_config(frame: pd.DataFrame) -> dict[str, Any]:
    """Human labels; dollars with 2 decimals (unit prices 4); rates in %; counts with
    thousands separators."""
    config: dict[str, Any] = {}
    for column in frame.columns:
        name = label(column)
        if is_money(column) or column.endswith(UNIT_PRICE_MARKERS):
            unit_price = any(marker in column for marker in UNIT_PRICE_MARKERS)
            config[column] = st.column_config.NumberColumn(
                name, format="$%.4f" if unit_price else "dollar"
            )
        elif is_rate(column):
            config[column] = st.column_config.NumberColumn(name, format="%.1f%%")
        elif column.endswith("_ms"):
            config[column] = st.column_config.NumberColumn(name, format="%.0f ms")
        elif pd.api.types.is_integer_dtype(frame[column].dtype):
            config[column] = st.column_config.NumberColumn(name, format="localized")
        else:
            config[column] = st.column_config.Column(name)
    return config


def table(
    frame: pd.DataFrame,
    name: str,
    *,
    columns: list[str] | None = None,
    select_key: str | None = None,
) -> None:
    """``frame`` (or its ``columns``) as a formatted table with a CSV download below;
    with ``select_key``, a click picks one row (read back from ``st.session_state``)."""
    chosen = frame[columns] if columns is not None else frame
    if select_key is None:
        st.dataframe(for_display(chosen), column_config=column_config(chosen), hide_index=True)
    else:
        st.dataframe(
            for_display(chosen),
            column_config=column_config(chosen),
            hide_index=True,
            on_select="rerun",
            selection_mode="single-row",
            key=select_key,
        )
    st.download_button(
        "Download CSV",
        chosen.to_csv(index=False).encode("utf-8"),  # the data, as stored
        file_name=f"{file_stem(name)}.csv",
        mime="text/csv",
        key=f"csv-{printable(name)}",
        on_click="ignore",
    )


def file_stem(name: str) -> str:
    """``name`` (which may hold a model's name) as a file name's stem: letters, digits,
    ``.``, ``-`` and ``_`` only. A bidi override in it would show the saved file's name
    reversed ("vsc.exe"), a slash would make it a path."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip(".") or "table"


def duration(span: dt.timedelta) -> str:
    """``15 min``, ``1 h``, ``7 days``: a bucket width for titles."""
    seconds = int(span.total_seconds())
    for unit, size in (("day", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'s' if unit == 'day' and n != 1 else ''}"
    return f"{seconds} s"
