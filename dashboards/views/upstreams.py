"""Upstreams & verdict: the scorecard per model and the provider.order verdict, with evidence."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from dashboards import data, filters, fmt, state

SCORECARD_COLUMNS = [
    "upstream", "attempts", "error_rate", "p50_latency_ms", "p95_latency_ms", "token_hit_rate",
    "cost_per_mtok_input_usd", "sessions_pinned",
]  # fmt: skip
VERDICT_LABELS = {
    "warranted": "provider.order warranted",
    "not_warranted": "provider.order not warranted",
    "insufficient_data": "insufficient data",
    "does_not_apply": "does not apply",
}


def show_verdict(verdict: pd.Series) -> None:
    label = VERDICT_LABELS.get(str(verdict["verdict"]), str(verdict["verdict"]))
    cols = st.columns(3)
    cols[0].metric("Verdict", label)
    cols[1].metric("Pinned upstream", fmt.text(verdict["pinned_upstream"]))
    cols[2].metric("Best alternative", fmt.text(verdict["best_upstream"]))
    box = {"warranted": st.error, "not_warranted": st.success}.get(str(verdict["verdict"]), st.info)
    box(str(verdict["reason"]))


def _interval(
    verdict: pd.Series, which: str, measure: str, low: str, high: str
) -> dict[str, object]:
    return {
        "upstream": f"{which}: {verdict[f'{which}_upstream']}",
        "value": verdict[f"{which}_{measure}"],
        "low": verdict[f"{which}_{low}"],
        "high": verdict[f"{which}_{high}"],
    }


def evidence(verdict: pd.Series) -> None:
    """The intervals the verdict compared: error rate and p95 latency, pinned vs best."""
    if fmt.missing(verdict["pinned_upstream"]) or fmt.missing(verdict["best_upstream"]):
        return
    charts = []
    for measure, low, high, title, axis in (
        ("error_rate", "error_low", "error_high", "error rate (95% interval)", "%"),
        ("p95_ms", "p95_low_ms", "p95_high_ms", "p95 latency, ms (95% interval)", ",.0f"),
    ):
        frame = pd.DataFrame(
            [_interval(verdict, who, measure, low, high) for who in ("pinned", "best")]
        ).astype({"value": float, "low": float, "high": float})
        y = alt.Y("upstream:N", title=None)
        bars = (
            alt.Chart(frame)
            .mark_rule(strokeWidth=3)
            .encode(x=alt.X("low:Q", title=title, axis=alt.Axis(format=axis)), x2="high:Q", y=y)
        )
        dots = (
            alt.Chart(frame)
            .mark_point(filled=True, size=90)
            .encode(x="value:Q", y=y, tooltip=["upstream:N", "value:Q", "low:Q", "high:Q"])
        )
        charts.append(alt.layer(bars, dots).properties(width=360, height=110))
    st.altair_chart(alt.hconcat(*charts))
    st.caption(
        f"Effective cost per million input tokens: pinned "
        f"{fmt.money(verdict['pinned_cost_per_mtok'])}, best alternative "
        f"{fmt.money(verdict['best_cost_per_mtok'])}; sticky cache hit rates "
        f"{fmt.rate(verdict['pinned_hit_rate'])} and {fmt.rate(verdict['best_hit_rate'])}."
    )
    if not fmt.missing(verdict["recommendation"]):
        st.text("provider object to send: " + str(verdict["recommendation"]))


def scorecard_chart(card: pd.DataFrame) -> alt.Chart:
    return (
        alt.Chart(card)
        .mark_circle(opacity=0.8)
        .encode(
            x=alt.X("p95_latency_ms:Q", title="p95 latency (ms)"),
            y=alt.Y("error_rate:Q", title="error rate", axis=alt.Axis(format="%")),
            size=alt.Size("attempts:Q"),
            color=alt.Color("upstream:N"),
            tooltip=["upstream:N", "attempts:Q", alt.Tooltip("error_rate:Q", format=".1%"),
                     "p95_latency_ms:Q", alt.Tooltip("token_hit_rate:Q", format=".1%"),
                     "sessions_pinned:Q"],
        )
        .properties(height=260)
    )  # fmt: skip


def model_section(model: str, card: pd.DataFrame, verdict: pd.DataFrame) -> None:
    st.header(model, divider="gray")
    if not verdict.empty:
        row = verdict.iloc[0]
        show_verdict(row)
        evidence(row)
    card = card.rename(columns={"cost_per_mtok_input": "cost_per_mtok_input_usd"})
    st.altair_chart(scorecard_chart(card))
    fmt.table(card, f"upstream_scorecard_{model}".replace("/", "_"), columns=SCORECARD_COLUMNS)


def main() -> None:
    st.title("Upstreams & the provider.order verdict")
    chosen = filters.current()
    scorecard = data.load("upstream_scorecard", chosen)
    if scorecard.empty:
        state.show_no_match()
        return
    verdicts = data.load("provider_order_verdict", chosen)
    models = sorted(scorecard["requested_model"].unique())
    st.caption(
        "provider.order pins every session to its first choice and provider.ignore drops an "
        "upstream while sticky routing continues; a change is warranted only when a pinned "
        "upstream is measurably worse and the change costs no more than the allowed share."
    )
    for model in models:
        model_section(
            model,
            scorecard[scorecard["requested_model"] == model],
            verdicts[verdicts["requested_model"] == model],
        )


main()
