"""Overview: calls, spend, what caching saved, fallback and error rates, over time."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from dashboards import data, filters, fmt, state
from dashboards.summary import bucket_for, ratio
from ledger.analytics import Filters, Saving


def _saving(label: str, saving: Saving, unit: str, help_text: str) -> None:
    note = f"{saving.unpriced:,} {unit} could not be priced" if saving.unpriced else None
    st.metric(label, fmt.money(saving.usd), help=help_text + (f" ({note})" if note else ""))


def headline(chosen: Filters, totals: dict[str, Any]) -> None:
    cols = st.columns(6)
    cols[0].metric("Calls", fmt.count(totals["calls"]))
    spend = totals["spend_usd"]
    unpriced = totals["unpriced_calls"]
    cols[1].metric(
        "Spend",
        fmt.money(spend),
        help=f"Known costs only; {unpriced:,} calls have no known cost." if unpriced else None,
    )
    with cols[2]:
        _saving(
            "Saved by prompt caching",
            data.load("prompt_cache_saving", chosen),
            "cache-read tokens",
            "Cache-read tokens priced at the full input price minus the cache-read price "
            "(genai-prices list prices).",
        )
    with cols[3]:
        _saving(
            "Saved by the response cache",
            data.load("response_cache_saving", chosen),
            "hits",
            "Response-cache hits times the mean cost of a served call of the same model.",
        )
    fallback = ratio(totals["fallback_calls"], totals["provider_calls"])
    errors = ratio(totals["failed_attempts"], totals["attempts"])
    cols[4].metric("Fallback rate", fmt.rate(fallback), help="Calls answered after a fallback.")
    cols[5].metric("Error rate", fmt.rate(errors), help="Provider attempts that failed.")


def over_time(chosen: Filters, totals: dict[str, Any]) -> None:
    first, last = totals["first_at"], totals["last_at"]
    bucket = bucket_for(pd.Timestamp(last) - pd.Timestamp(first))
    frame = data.load("timeline", chosen, bucket)
    st.subheader(f"Over time (per {fmt.duration(bucket)})")
    frame["spend_usd"] = pd.to_numeric(frame["spend_usd"].map(_to_float), errors="coerce")
    frame["fallback_rate"] = frame["fallback_calls"] / frame["calls"].where(frame["calls"] > 0)
    frame["error_rate"] = frame["failed_attempts"] / frame["attempts"].where(frame["attempts"] > 0)
    base = alt.Chart(frame).encode(x=alt.X("bucket:T", title=None))
    left, right = st.columns(2)
    left.altair_chart(
        base.mark_bar().encode(
            y=alt.Y("calls:Q", title="calls"), tooltip=["bucket:T", "calls:Q", "spend_usd:Q"]
        )
        & base.mark_area(opacity=0.6).encode(y=alt.Y("spend_usd:Q", title="spend (USD)")),
    )
    rates = frame.melt(
        id_vars=["bucket"], value_vars=["fallback_rate", "error_rate"], var_name="rate"
    )
    right.altair_chart(
        alt.Chart(rates)
        .mark_line(point=True)
        .encode(
            x=alt.X("bucket:T", title=None),
            y=alt.Y("value:Q", title="share", axis=alt.Axis(format="%")),
            color=alt.Color("rate:N", title=None),
            tooltip=["bucket:T", "rate:N", alt.Tooltip("value:Q", format=".1%")],
        ),
    )
    with st.expander("Per-bucket figures"):
        fmt.table(frame, "timeline")


def _to_float(value: Any) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def main() -> None:
    st.title("Overview")
    chosen = filters.current()
    totals = data.load("overview_totals", chosen)
    if totals["calls"] == 0:
        state.show_no_match()
        return
    headline(chosen, totals)
    over_time(chosen, totals)


main()
