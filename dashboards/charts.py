"""Chart pieces every page shares: UTC time axes, money as floats, upstream labels.

Vega-Lite formats times in the browser's time zone unless told otherwise;
these axes and tooltips are UTC, 24-hour, with a domain that fits the data.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any, Final

import altair as alt
import pandas as pd  # type: ignore[import-untyped]

from dashboards import fmt
from ledger.providers import PROVIDERS

DAY: Final = dt.timedelta(days=1)


def to_float(values: pd.Series) -> pd.Series:
    """Money (``Decimal`` or ``None``) as floats for a chart; the tables keep the Decimals."""
    return pd.to_numeric(
        values.map(lambda v: None if fmt.missing(v) else float(v)), errors="coerce"
    ).astype(float)


def time_format(span: dt.timedelta) -> str:
    """24-hour UTC labels: ``14:01`` within a day, with the date beyond."""
    if span <= DAY:
        return "%H:%M"
    return "%b %d %H:%M" if span <= 7 * DAY else "%b %d"


def time_x(
    field: str,
    span: dt.timedelta,
    *,
    title: str = "time (UTC)",
    domain: tuple[dt.datetime, dt.datetime] | None = None,
) -> alt.X:
    """An x axis of UTC times, 24-hour labels; ``domain`` pins its ends (else the data's)."""
    scale = alt.Scale(type="utc", nice=False)
    if domain is not None:
        scale = alt.Scale(type="utc", nice=False, domain=[_iso(d) for d in domain])
    # labelExpr, not format: Streamlit's Vega-Lite theme keeps its own 12-hour local labels.
    label = f"utcFormat(datum.value, '{time_format(span)}')"
    return alt.X(
        f"{field}:T",
        title=title,
        scale=scale,
        axis=alt.Axis(labelExpr=label, labelOverlap=True),
    )


def time_tip(field: str, title: str = "time (UTC)") -> alt.Tooltip:
    """A tooltip line for ``field`` in UTC (from :func:`with_utc_text`'s text column)."""
    return alt.Tooltip(f"{field}_utc:N", title=title)


def with_utc_text(frame: pd.DataFrame, field: str) -> pd.DataFrame:
    """A copy with ``<field>_utc``: the time as ``2025-11-03 14:01:05 UTC`` for tooltips."""
    shown = frame.copy()
    shown[f"{field}_utc"] = pd.to_datetime(shown[field], utc=True).dt.strftime(
        "%Y-%m-%d %H:%M:%S UTC"
    )
    return shown


def _iso(moment: Any) -> str:
    iso: str = pd.Timestamp(moment).tz_convert("UTC").isoformat()  # pandas is untyped
    return iso


def padded(times: Iterable[Any], *, share: float = 0.05) -> tuple[dt.datetime, dt.datetime]:
    """The first and last of ``times``, widened by ``share`` of the span (30 s at least)."""
    stamps = [pd.Timestamp(t) for t in times if not fmt.missing(t)]
    first, last = min(stamps), max(stamps)
    pad = max((last - first) * share, pd.Timedelta(seconds=30))
    return (first - pad).to_pydatetime(), (last + pad).to_pydatetime()


def upstream_label(upstream: object) -> str:
    """``Anthropic (via OpenRouter)`` for an upstream behind OpenRouter, ``anthropic
    (direct)`` for a provider called directly: two routes to the same lab side by side.

    An upstream identity is ``coalesce(upstream, provider)``: a provider slug means the
    call went to that provider directly; any other name is one OpenRouter reported."""
    name = fmt.printable(fmt.text(upstream))
    if str(upstream) in PROVIDERS:
        return f"{name} (direct)"
    return f"{name} (via OpenRouter)"  # short: legends fit at 390 px
