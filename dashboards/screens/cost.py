"""Cost: requested vs responding provider, by agent and model; what the fallbacks cost;
the ledger's estimate against what was billed, with how much of it a bill covers."""

from __future__ import annotations

from decimal import Decimal
from typing import Final

import altair as alt
import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from dashboards import charts, data, filters, fmt, notices, summary
from ledger.analytics import Filters

#: Said whenever no row has a billed figure: every cost on the page is an estimate.
NOTHING_RECONCILED: Final = (
    "No row under these filters has a billed cost yet: every cost on this page is the "
    "ledger's estimate. `ledger reconcile openrouter` stores what OpenRouter billed each "
    "generation. OpenAI's and Anthropic's reports are daily totals: they cannot bill single "
    "rows (`ledger reconcile openai|anthropic` checks the totals instead)."
)


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


def _difference(billed: Decimal | None, estimated: Decimal | None) -> tuple[str, str | None]:
    """``billed − estimated`` as a headline, and its share of the estimate as the delta."""
    if billed is None or estimated is None:
        return "–", None
    gap = billed - estimated
    share = summary.ratio(float(gap), float(estimated))
    sign = "+" if gap >= 0 else ""
    return f"{sign}{fmt.money(gap)}", None if share is None else f"{sign}{fmt.rate(share)}"


def billing_headline(frame: pd.DataFrame) -> int:
    """Coverage and difference of the reconciled rows; returns how many there are."""
    rows, reconciled = int(frame["rows"].sum()), int(frame["reconciled_rows"].sum())
    estimated = summary.total_usd(frame["estimated_usd"])
    covered = summary.total_usd(frame["reconciled_estimated_usd"])
    billed = summary.total_usd(frame["billed_usd"]) if reconciled else None
    spend_share = (
        summary.ratio(float(covered or 0), float(estimated)) if estimated and reconciled else None
    )
    difference, delta = _difference(billed, covered if reconciled else None)
    cols = st.columns(4)
    cols[0].metric(
        "Rows reconciled",
        fmt.rate(summary.ratio(reconciled, rows)),
        help=f"{reconciled:,} of {rows:,} rows carry a billed cost.",
    )
    cols[1].metric(
        "Spend reconciled",
        fmt.rate(spend_share),
        help="Share of the estimated spend on rows that carry a billed cost.",
    )
    cols[2].metric("Billed (reconciled rows)", fmt.money(billed) if reconciled else "–")
    cols[3].metric(
        "Billed − estimated",
        difference,
        delta=delta,
        delta_color="off",
        help="On the reconciled rows only: what the bill says beyond the estimate.",
    )
    return reconciled  # fmt: skip


def billing_chart(frame: pd.DataFrame) -> None:
    shown = frame[frame["reconciled_rows"] > 0].copy()
    long = pd.DataFrame(
        {
            "day": pd.to_datetime(list(shown["day"]) * 2),
            "figure": ["estimated"] * len(shown) + ["billed"] * len(shown),
            "usd": list(charts.to_float(shown["reconciled_estimated_usd"]))
            + list(charts.to_float(shown["billed_usd"])),
        }
    )
    st.altair_chart(
        alt.Chart(long.dropna())
        .mark_bar()
        .encode(
            x=alt.X("yearmonthdate(day):T", title="day (UTC)"),
            xOffset=alt.XOffset("figure:N"),
            y=alt.Y("usd:Q", title="reconciled rows' cost", axis=alt.Axis(format="$,.4f")),
            color=alt.Color("figure:N", title=None, legend=alt.Legend(orient="bottom")),
            tooltip=[alt.Tooltip("yearmonthdate(day):T", title="day"),
                     alt.Tooltip("figure:N"), alt.Tooltip("usd:Q", format="$,.6f")],
        ),
        width="stretch",
    )  # fmt: skip


def estimated_vs_billed(chosen: Filters) -> None:
    st.subheader("Estimated vs billed")
    frame = data.load("estimated_vs_billed", chosen)
    reconciled = billing_headline(frame)
    if not reconciled:
        st.info(NOTHING_RECONCILED)
    else:
        unpriced = int(frame["reconciled_unpriced_rows"].sum())
        if unpriced:
            st.caption(f"{unpriced:,} reconciled rows had no estimate: their billed cost is "
                       "in the billed total, not in the difference's estimate.")  # fmt: skip
        billing_chart(frame)
    awaiting = int(frame["awaiting_rows"].sum())
    if awaiting:
        st.caption(f"{awaiting:,} OpenRouter rows await a billed cost "
                   "(run `ledger reconcile openrouter`).")  # fmt: skip
    fmt.table(frame, "estimated_vs_billed")


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
    estimated_vs_billed(chosen)


main()
