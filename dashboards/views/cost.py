"""Cost: requested vs responding provider, by agent and model; what the fallbacks cost."""

from __future__ import annotations

import altair as alt
import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from dashboards import charts, data, filters, fmt, notices, summary
from ledger.analytics import Filters


def _numeric_usd(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows with a known cost, ``cost_usd`` as floats (charts only; tables keep the
    Decimals). An unknown cost stays out of the chart: one null in a stacked bar makes
    Vega-Lite drop the whole bar (the stack's running sum turns NaN)."""
    shown = fmt.printable_text(frame)
    shown["cost_usd"] = charts.to_float(shown["cost_usd"])
    return shown[shown["cost_usd"].notna()]


def _unknown_note(frame: pd.DataFrame) -> None:
    unknown = int(frame.loc[frame["cost_usd"].map(fmt.missing), "calls"].sum())
    if unknown:
        st.caption(f"{unknown:,} calls of unknown cost (every attempt failed) are in the "
                   "table, not in the chart.")  # fmt: skip


def headline(attribution: pd.DataFrame, fallbacks: pd.DataFrame, failed: pd.DataFrame) -> None:
    cols = st.columns(4)
    cols[0].metric(
        "Total spend",
        fmt.dollars(summary.total_usd(attribution["cost_usd"])),
        help="Known costs of every call, failed attempts included.",
    )
    cols[1].metric("Fallback calls", fmt.count(int(attribution["fallback_calls"].sum())))
    cols[2].metric(
        "Fallback spend",
        fmt.dollars(summary.total_usd(fallbacks["cost_usd"])),
        help="What calls answered after a fallback cost, all their attempts included.",
    )
    cols[3].metric("Failed-attempt spend", fmt.dollars(summary.total_usd(failed["cost_usd"])),
                   help="Known costs of attempts that failed (usually nothing; unknown if "
                        "no failed attempt reported a cost).")  # fmt: skip


def by_provider(attribution: pd.DataFrame) -> None:
    st.subheader("Requested vs responding provider")
    shown = _numeric_usd(attribution)
    st.altair_chart(
        alt.Chart(shown)
        .mark_bar()
        .encode(
            x=alt.X("sum(cost_usd):Q", title="spend", axis=alt.Axis(format="$,.2f")),
            y=alt.Y("requested_provider:N", title="requested provider"),
            color=alt.Color("responding_provider:N", title="responding provider",
                            legend=alt.Legend(orient="bottom")),
            tooltip=[alt.Tooltip("requested_provider:N", title="requested provider"),
                     alt.Tooltip("responding_provider:N", title="responding provider"),
                     alt.Tooltip("requested_model:N", title="model"),
                     alt.Tooltip("calls:Q", title="calls", format=","),
                     alt.Tooltip("fallback_calls:Q", title="fallback calls", format=","),
                     alt.Tooltip("cost_usd:Q", title="spend", format="$,.2f")],
        )
        .properties(height=alt.Step(36)),
        width="stretch",
    )  # fmt: skip
    _unknown_note(attribution)
    fmt.table(attribution.sort_values("cost_usd", ascending=False), "cost_attribution")


def by_agent(chosen: Filters) -> None:
    st.subheader("By agent and model")
    frame = data.load("cost_by_agent", chosen)
    shown = summary.fill_agent(_numeric_usd(frame))
    st.altair_chart(
        alt.Chart(shown)
        .mark_bar()
        .encode(
            x=alt.X("sum(cost_usd):Q", title="spend", axis=alt.Axis(format="$,.2f")),
            y=alt.Y("actor_id:N", title="agent", sort="-x"),
            color=alt.Color("requested_model:N", title="model",
                            legend=alt.Legend(orient="bottom", columns=1, labelLimit=0)),
            tooltip=[alt.Tooltip("actor_id:N", title="agent"),
                     alt.Tooltip("requested_model:N", title="model"),
                     alt.Tooltip("responding_provider:N", title="responding provider"),
                     alt.Tooltip("calls:Q", title="calls", format=","),
                     alt.Tooltip("cost_usd:Q", title="spend", format="$,.2f")],
        )
        .properties(height=alt.Step(28)),
        width="stretch",
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
        notices.show_no_match()
        return
    fallbacks = data.load("fallback_cost", chosen)
    failed = data.load("failed_attempts", chosen)
    headline(attribution, fallbacks, failed)
    by_provider(attribution)
    by_agent(chosen)
    fallback_detail(fallbacks, failed)


main()
