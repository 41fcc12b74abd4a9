"""Upstreams & verdict: the scorecard per model and the provider.order verdict, with evidence."""

from __future__ import annotations

import altair as alt
import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from dashboards import charts, data, filters, fmt, notices
from dashboards import verdicts as verdict_strip

SCORECARD_COLUMNS = [
    "upstream", "attempts", "error_rate", "p50_latency_ms", "p95_latency_ms", "token_hit_rate",
    "cost_per_mtok_input_usd", "sessions_pinned",
]  # fmt: skip


def show_verdict(verdict: pd.Series) -> None:
    """Pinned and best upstream, then the reason (the strip above has the badge); plain
    text, since upstream names come from provider responses."""
    st.text(
        f"Pinned upstream: {fmt.printable(fmt.text(verdict['pinned_upstream']))} · "
        f"best alternative: {fmt.printable(fmt.text(verdict['best_upstream']))}"
    )
    st.text(fmt.printable(verdict["reason"]))  # figures and upstream names: plain text


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
    measures = [("p95_ms", "p95_low_ms", "p95_high_ms", "p95 latency, ms (95% interval)", ",.0f")]
    observable = verdict.get("error_rates_observable")
    if observable is not None and not fmt.missing(observable) and not bool(observable):
        st.caption("Error rates were not observable (no failed attempt named its upstream), "
                   "so only latency is compared.")  # fmt: skip
    else:
        measures.insert(0, ("error_rate", "error_low", "error_high",
                            "error rate (95% interval)", ".1%"))  # fmt: skip
    panels = []
    for measure, low, high, title, axis in measures:
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
            .encode(x="value:Q", y=y, tooltip=[
                alt.Tooltip("upstream:N", title="upstream"),
                alt.Tooltip("value:Q", title="measured", format=axis),
                alt.Tooltip("low:Q", title="interval from", format=axis),
                alt.Tooltip("high:Q", title="interval to", format=axis)])
        )  # fmt: skip
        panels.append(alt.layer(bars, dots).properties(height=110))
    columns = st.columns(len(panels))
    for column, chart in zip(columns, panels, strict=True):
        column.altair_chart(chart, width="stretch")
    st.caption(
        f"Effective cost per million input tokens: pinned "
        f"{fmt.money(verdict['pinned_cost_per_mtok'])}, best alternative "
        f"{fmt.money(verdict['best_cost_per_mtok'])}; sticky cache hit rates "
        f"{fmt.rate(verdict['pinned_hit_rate'])} and {fmt.rate(verdict['best_hit_rate'])}."
    )
    if not fmt.missing(verdict["recommendation"]):
        st.text("provider object to send: " + str(verdict["recommendation"]))


def scorecard_chart(card: pd.DataFrame) -> alt.Chart:
    """Error rate against p95 latency per upstream, sized by attempts (its sample)."""
    shown = card.assign(upstream=card["upstream"].map(charts.upstream_label))
    y = alt.Y("error_rate:Q", title="error rate", axis=alt.Axis(format=".1%", tickMinStep=0.001))
    if shown["error_rate"].fillna(0).eq(0).all():
        y = alt.Y("error_rate:Q", title="error rate (none failed)",
                  axis=alt.Axis(format="%", values=[0]))  # fmt: skip
    chart: alt.Chart = (
        alt.Chart(shown)
        .mark_circle(opacity=0.8)
        .encode(
            x=alt.X("p95_latency_ms:Q", title="p95 latency (ms)", axis=alt.Axis(format=",.0f")),
            y=y,
            size=alt.Size("attempts:Q", title="attempts", legend=alt.Legend(orient="bottom")),
            color=alt.Color("upstream:N", title="upstream",
                            legend=alt.Legend(orient="bottom", columns=1, labelLimit=0)),
            tooltip=[alt.Tooltip("upstream:N", title="upstream"),
                     alt.Tooltip("attempts:Q", title="attempts", format=","),
                     alt.Tooltip("error_rate:Q", title="error rate", format=".1%"),
                     alt.Tooltip("p95_latency_ms:Q", title="p95 latency (ms)", format=",.0f"),
                     alt.Tooltip("token_hit_rate:Q", title="token hit rate", format=".1%"),
                     alt.Tooltip("sessions_pinned:Q", title="sessions pinned", format=",")],
        )
        .properties(height=260)
    )  # fmt: skip
    return chart


def model_section(model: str, card: pd.DataFrame, verdict: pd.DataFrame) -> None:
    st.header(fmt.plain(model), divider="gray")  # a model name is data, never Markdown
    if not verdict.empty:
        row = verdict.iloc[0]
        show_verdict(row)
        evidence(row)
    card = card.rename(columns={"cost_per_mtok_input": "cost_per_mtok_input_usd"})
    st.altair_chart(scorecard_chart(card), width="stretch")
    st.caption("Upstreams OpenRouter named are marked as such; a provider called directly "
               "is marked direct.")  # fmt: skip
    fmt.table(card, f"upstream_scorecard_{model}".replace("/", "_"), columns=SCORECARD_COLUMNS)


def main() -> None:
    st.title("Upstreams & the provider.order verdict")
    chosen = filters.current()
    scorecard = data.load("upstream_scorecard", chosen)
    if scorecard.empty:
        notices.show_no_match()
        return
    verdicts = data.load("provider_order_verdict", chosen)
    models = sorted(scorecard["requested_model"].unique())
    st.caption(
        "provider.order pins every session to its first choice and provider.ignore drops an "
        "upstream while sticky routing continues; a change is warranted only when a pinned "
        "upstream is measurably worse and the change costs no more than the allowed share."
    )
    verdict_strip.strip(verdicts)
    for model in models:
        model_section(
            model,
            scorecard[scorecard["requested_model"] == model],
            verdicts[verdicts["requested_model"] == model],
        )


main()
