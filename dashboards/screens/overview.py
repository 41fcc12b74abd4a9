"""Overview, the landing page: the verdicts, then the mission's question first.

Stickiness and cache-hit rate with vs without the session key and what
switches cost, then spend over time stacked by model or agent with the change
against the previous period, then calls, savings and failure rates.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import altair as alt
import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from dashboards import charts, data, experiments, filters, fmt, notices, summary, verdicts
from dashboards.summary import bucket_for, ratio
from ledger.analytics import Filters, Saving

STACKS = {"model": "requested_model", "agent": "actor_id"}


def data_header() -> None:
    """Where the data comes from, the time span it covers and its row count."""
    options = data.options()
    span = "no rows"
    if options.first_at is not None and options.last_at is not None:
        first, last = (t.astimezone(dt.UTC) for t in (options.first_at, options.last_at))
        end = f"{last:%H:%M}" if last.date() == first.date() else f"{last:%Y-%m-%d %H:%M}"
        span = f"{first:%Y-%m-%d %H:%M} → {end} UTC"
    st.caption(f"Ledger {fmt.plain(data.where())} · {span} · {options.rows:,} rows")


def the_question(chosen: Filters) -> None:
    """Does the session key keep conversations on one upstream, and what does that buy?"""
    st.subheader("Sticky routing: with vs without the session key")
    sticky = summary.stickiness_by_key(data.load("agent_stickiness", chosen))
    hits = summary.hit_rate_by_key(data.load("cache_hits_by_agent", chosen))
    first, second = st.columns(2)
    with first:
        left, right = st.columns(2)
        left.metric("Stickiness, key sent", fmt.rate(sticky[True]),
                    help="1 − switches / transitions within the idle window.")  # fmt: skip
        right.metric("Stickiness, no key", fmt.rate(sticky[False]), help=summary.NO_KEY_HELP)
    with second:
        left, right = st.columns(2)
        left.metric("Cache hits, key sent", fmt.rate(hits[True]),
                    help="Cache-read tokens / input tokens over served attempts.")  # fmt: skip
        right.metric("Cache hits, no key", fmt.rate(hits[False]), help=summary.NO_KEY_HELP)
    switch_cost(chosen)


def switch_cost(chosen: Filters) -> None:
    """What switches cost in dollars (the ``switch_costs`` view), when this version has it."""
    if not data.has_view("switch_costs"):
        st.caption(
            "What switches cost in dollars appears here once the analytics has the "
            "`switch_costs` view."
        )
        return
    frame = data.load("switch_costs", chosen)
    cols = st.columns(3)
    cols[0].metric("Switches in the pin window", _summed(frame, "switches"))
    cols[1].metric("Idle releases", _summed(frame, "idle_releases"))
    # cost_usd, as `ledger report` says it: switches and idle releases both cost the cache
    cols[2].metric("Cache lost to stickiness failures",
                   fmt.dollars(summary.total_usd(frame["cost_usd"]))
                   if "cost_usd" in frame else "unknown",
                   help="Cache-read tokens lost on the first call after each switch or idle "
                        "release, priced at list prices (the switch_costs view).")  # fmt: skip


def _summed(frame: pd.DataFrame, column: str) -> str:
    return fmt.count(int(frame[column].sum())) if column in frame else "–"


def _saving(label: str, saving: Saving, unit: str, help_text: str) -> None:
    note = f"{saving.unpriced:,} {unit} could not be priced" if saving.unpriced else None
    st.metric(label, fmt.dollars(saving.usd), help=help_text + (f" ({note})" if note else ""))


def previous(chosen: Filters, last_at: dt.datetime | None) -> Filters | None:
    """The period of the same length just before ``chosen``'s (``None`` for all time)."""
    if chosen.start is None:
        return None
    end = chosen.end or max(last_at or chosen.start, chosen.start)
    return dataclasses.replace(chosen, start=chosen.start - (end - chosen.start), end=chosen.start)


def headline(chosen: Filters, totals: dict[str, Any]) -> None:
    before = previous(chosen, data.options().last_at)
    delta = None
    if before is not None:
        earlier = data.load("overview_totals", before)["spend_usd"]
        now = totals["spend_usd"]
        if now is not None and earlier is not None:
            change = now - earlier
            delta = f"{'+' if change >= 0 else '-'}{fmt.dollars(abs(change))} vs previous period"
    top = st.columns(3)
    top[0].metric("Calls", fmt.count(totals["calls"]))
    unpriced = totals["unpriced_calls"]
    top[1].metric(
        "Spend",
        fmt.dollars(totals["spend_usd"]),
        delta=delta,
        delta_color="inverse",
        help=f"Known costs only; {unpriced:,} calls have no known cost." if unpriced else None,
    )
    fallback = ratio(totals["fallback_calls"], totals["provider_calls"])
    top[2].metric("Fallback rate", fmt.rate(fallback), help="Calls answered after a fallback.")
    low = st.columns(3)
    with low[0]:
        _saving(
            "Prompt-cache saving",
            data.load("prompt_cache_saving", chosen),
            "cache-read tokens",
            "Cache-read tokens priced at the full input price minus the cache-read price "
            "(genai-prices list prices).",
        )
    with low[1]:
        _saving(
            "Response-cache saving",
            data.load("response_cache_saving", chosen),
            "hits",
            "Response-cache hits times the mean cost of a served call of the same model.",
        )
    errors = ratio(totals["failed_attempts"], totals["attempts"])
    low[2].metric("Error rate", fmt.rate(errors), help="Provider attempts that failed.")


def spend_chart(chosen: Filters, bucket: dt.timedelta, span: dt.timedelta) -> None:
    stack = st.radio("Stack spend by", list(STACKS), horizontal=True, key="overview_stack")
    by = STACKS[stack or "model"]
    frame = data.load("spend_over_time", chosen, bucket, by)
    frame = fmt.printable_text(charts.with_utc_text(frame, "bucket"))
    frame["spend_usd"] = charts.to_float(frame["spend_usd"])
    total = frame["spend_usd"].sum()
    st.caption(f"Total {fmt.dollars(total)} over {fmt.count(int(frame['calls'].sum()))} calls")
    st.altair_chart(
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=charts.time_x("bucket", span),
            y=alt.Y("sum(spend_usd):Q", title="spend", axis=alt.Axis(format="$,.2f")),
            color=alt.Color(f"{by}:N", title=fmt.label(by),
                            legend=alt.Legend(orient="bottom", columns=1, labelLimit=0)),
            tooltip=[charts.time_tip("bucket"), alt.Tooltip(f"{by}:N", title=fmt.label(by)),
                     alt.Tooltip("calls:Q", title="calls", format=","),
                     alt.Tooltip("spend_usd:Q", title="spend", format="$,.2f")],
        )
        .properties(height=280),
        width="stretch",
    )  # fmt: skip


def _rate(frame: pd.DataFrame, name: str, numerator: str, denominator: str) -> pd.DataFrame:
    sample = frame[denominator]
    return pd.DataFrame(
        {
            "bucket": frame["bucket"],
            "rate": name,
            "value": frame[numerator] / sample.where(sample > 0),
            "sample": sample,
            "unit": denominator,
        }
    )


def rates_chart(frame: pd.DataFrame, span: dt.timedelta) -> None:
    """Fallback and error rates per bucket, each point sized by its sample; hidden when
    nothing fell back or failed (a flat 0 line says nothing)."""
    if frame["fallback_calls"].sum() == 0 and frame["failed_attempts"].sum() == 0:
        st.caption("No call fell back and no attempt failed in this period.")
        return
    rates = pd.concat(
        [
            _rate(frame, "fallback rate", "fallback_calls", "calls"),
            _rate(frame, "error rate", "failed_attempts", "attempts"),
        ]
    ).dropna(subset=["value"])
    rates = charts.with_utc_text(rates, "bucket")
    st.altair_chart(
        alt.Chart(rates)
        .mark_circle(opacity=0.7)
        .encode(
            x=charts.time_x("bucket", span),
            y=alt.Y("value:Q", title="share", axis=alt.Axis(format=".0%", tickMinStep=0.01)),
            color=alt.Color("rate:N", title=None, legend=alt.Legend(orient="bottom")),
            size=alt.Size("sample:Q", title="sample (calls or attempts)",
                          scale=alt.Scale(range=[10, 300]), legend=alt.Legend(orient="bottom")),
            tooltip=[charts.time_tip("bucket"), alt.Tooltip("rate:N", title="rate"),
                     alt.Tooltip("value:Q", title="share", format=".1%"),
                     alt.Tooltip("sample:Q", title="out of", format=","),
                     alt.Tooltip("unit:N", title="counted in")],
        )
        .properties(height=280),
        width="stretch",
    )  # fmt: skip


def over_time(chosen: Filters, totals: dict[str, Any]) -> None:
    first, last = pd.Timestamp(totals["first_at"]), pd.Timestamp(totals["last_at"])
    span = (last - first).to_pytimedelta()
    bucket = bucket_for(span)
    st.subheader(f"Spend over time (per {fmt.duration(bucket)})")
    frame = data.load("timeline", chosen, bucket)
    left, right = st.columns(2)
    with left:
        spend_chart(chosen, bucket, span)
    with right:
        st.markdown("**Fallback and error rates** (each point sized by its sample)")
        rates_chart(frame, span)
    with st.expander("Per-bucket figures"):
        fmt.table(frame, "timeline")


def main() -> None:
    st.title("Overview")
    data_header()
    chosen = filters.current()
    totals = data.load("overview_totals", chosen)
    if totals["calls"] == 0:
        notices.show_no_match()
        return
    verdicts.strip(data.load("provider_order_verdict", chosen))
    experiments.strip(data.experiments())
    the_question(chosen)
    st.subheader("Calls, spend and savings")
    headline(chosen, totals)
    over_time(chosen, totals)


main()
