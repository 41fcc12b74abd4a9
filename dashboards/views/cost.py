"""Cost: requested vs responding provider, by agent and model; what the fallbacks cost."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from dashboards import data, filters, fmt, state, summary
from ledger.analytics import Filters


def _numeric_usd(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy with ``cost_usd`` as floats (charts only; tables keep the Decimals)."""
    shown = frame.copy()
    shown["cost_usd"] = pd.to_numeric(
        shown["cost_usd"].map(lambda v: None if v is None or pd.isna(v) else float(v)),
        errors="coerce",
    )
    return shown


def headline(attribution: pd.DataFrame, fallbacks: pd.DataFrame, failed: pd.DataFrame) -> None:
    cols = st.columns(4)
    cols[0].metric(
        "Total spend",
        fmt.money(summary.total_usd(attribution["cost_usd"])),
        help="Known costs of every call, failed attempts included.",
    )
    cols[1].metric("Fallback calls", fmt.count(int(attribution["fallback_calls"].sum())))
    cols[2].metric(
        "Spend on fallback calls",
        fmt.money(summary.total_usd(fallbacks["cost_usd"])),
        help="What calls answered after a fallback cost, all their attempts included.",
    )
    cols[3].metric("Spend on failed attempts", fmt.money(summary.total_usd(failed["cost_usd"])),
                   help="Known costs of attempts that failed (usually nothing; unknown if "
                        "no failed attempt reported a cost).")  # fmt: skip


def by_provider(attribution: pd.DataFrame) -> None:
    st.subheader("Requested vs responding provider")
    shown = _numeric_usd(attribution)
    shown["responding_provider"] = shown["responding_provider"].fillna("(every attempt failed)")
    st.altair_chart(
        alt.Chart(shown)
        .mark_bar()
        .encode(
            x=alt.X("sum(cost_usd):Q", title="spend (USD)"),
            y=alt.Y("requested_provider:N", title="requested provider"),
            color=alt.Color("responding_provider:N", title="responding provider"),
            tooltip=["requested_provider:N", "responding_provider:N", "requested_model:N",
                     "calls:Q", "fallback_calls:Q", alt.Tooltip("cost_usd:Q", format="$.4f")],
        )
        .properties(height=200)
    )  # fmt: skip
    fmt.table(attribution.sort_values("cost_usd", ascending=False), "cost_attribution")


def by_agent(chosen: Filters) -> None:
    st.subheader("By agent and model")
    frame = data.load("cost_by_agent", chosen)
    shown = summary.fill_agent(_numeric_usd(frame))
    st.altair_chart(
        alt.Chart(shown)
        .mark_bar()
        .encode(
            x=alt.X("sum(cost_usd):Q", title="spend (USD)"),
            y=alt.Y("actor_id:N", title="agent", sort="-x"),
            color=alt.Color("requested_model:N", title="requested model"),
            tooltip=["actor_id:N", "requested_model:N", "responding_provider:N", "calls:Q",
                     alt.Tooltip("cost_usd:Q", format="$.4f")],
        )
        .properties(height=220)
    )  # fmt: skip
    fmt.table(frame, "cost_by_agent")


def fallback_detail(fallbacks: pd.DataFrame, failed: pd.DataFrame) -> None:
    st.subheader("What the fallbacks cost")
    if fallbacks.empty:
        st.info("No call fell back to another provider under these filters.")
    else:
        fmt.table(fallbacks, "fallback_cost")
    st.markdown("**Failed attempts** (each one a reason to fall back)")
    if failed.empty:
        st.info("No attempt failed under these filters.")
    else:
        fmt.table(failed, "failed_attempts")


def main() -> None:
    st.title("Cost attribution")
    chosen = filters.current()
    attribution = data.load("cost_attribution", chosen)
    if attribution.empty:
        state.show_no_match()
        return
    fallbacks = data.load("fallback_cost", chosen)
    failed = data.load("failed_attempts", chosen)
    headline(attribution, fallbacks, failed)
    by_provider(attribution)
    by_agent(chosen)
    fallback_detail(fallbacks, failed)


main()
