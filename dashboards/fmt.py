"""Formatting for people: money in USD, rates in %, tables with a CSV download.

Money arrives as ``Decimal`` (exact, as in the ledger) and is only turned into
a float for display; the CSV download keeps the exact values.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

import pandas as pd
import streamlit as st

RATE_SUFFIXES = ("rate", "share", "stickiness")


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
    return f"${amount:,.2f}" if abs(amount) >= 1 else f"${amount:,.4f}"


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
        if is_money(column):
            shown[column] = pd.to_numeric(
                shown[column].map(lambda v: None if missing(v) else float(v)), errors="coerce"
            )
        elif is_rate(column):
            shown[column] = pd.to_numeric(shown[column], errors="coerce") * 100
    return shown


def column_config(frame: pd.DataFrame) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for column in frame.columns:
        label = column.replace("_", " ")
        if is_money(column):
            config[column] = st.column_config.NumberColumn(label, format="$%.4f")
        elif is_rate(column):
            config[column] = st.column_config.NumberColumn(label, format="%.1f%%")
        elif column.endswith("_ms"):
            config[column] = st.column_config.NumberColumn(label, format="%.0f ms")
        else:
            config[column] = st.column_config.Column(label)
    return config


def table(frame: pd.DataFrame, name: str, *, columns: list[str] | None = None) -> None:
    """``frame`` (or its ``columns``) as a formatted table with a CSV download below."""
    chosen = frame[columns] if columns is not None else frame
    st.dataframe(
        for_display(chosen),
        column_config=column_config(chosen),
        hide_index=True,
    )
    st.download_button(
        "Download CSV",
        chosen.to_csv(index=False).encode("utf-8"),
        file_name=f"{name}.csv",
        mime="text/csv",
        key=f"csv-{name}",
        on_click="ignore",
    )


def duration(span: dt.timedelta) -> str:
    """``15 min``, ``1 h``, ``7 days``: a bucket width for titles."""
    seconds = int(span.total_seconds())
    for unit, size in (("day", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'s' if unit == 'day' and n != 1 else ''}"
    return f"{seconds} s"
