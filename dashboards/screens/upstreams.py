"""Upstreams & verdict: the scorecard per model and the provider.order verdict, with evidence."""

from __future__ import annotations

import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from dashboards import charts, data, filters, fmt, notices
from dashboards import verdicts as verdict_strip
from ledger.analytics.read import verdict_words as words
from ledger.analytics.read.verdict import from_row

SCORECARD_COLUMNS = [
    "upstream", "attempts", "error_rate", "p50_latency_ms", "p95_latency_ms", "token_hit_rate",
    "cost_per_mtok_input_usd", "sessions_pinned",
]  # fmt: skip


def show_verdict(verdict: pd.Series) -> None:
    """Pinned and best upstream, then the reason (the strip above has the badge); plain
    text, since upstream names come from provider responses. The words are
    :mod:`ledger.analytics.read.verdict_words`', written from the row's typed figures."""
    typed = from_row(verdict.to_dict())
    st.text(
        f"Pinned upstream: {fmt.printable(fmt.text(typed.pinned_upstream))} · "
        f"best alternative: {fmt.printable(fmt.text(typed.best_upstream))}"
    )
    st.text(fmt.printable(words.reason(typed)))  # figures and upstream names: plain text


def _interval(
    verdict: pd.Series, which: str, measure: str, low: str, high: str
) -> dict[str, object]:
    return {
        "upstream": f"{which}: {fmt.printable(fmt.text(verdict[f'{which}_upstream']))}",
        "value": verdict[f"{which}_{measure}"],
        "low": verdict[f"{which}_{low}"],
        "high": verdict[f"{which}_{high}"],
    }


def _field(name: str, kind: str, **extra: object) -> dict[str, object]:
    return {"field": name, "type": kind, **extra}


def _tip(name: str, kind: str, title: str, fmt_: str | None = None) -> dict[str, object]:
    return _field(name, kind, title=title, **({"format": fmt_} if fmt_ else {}))


# The charts below are Vega-Lite specs written as dicts, not Altair objects:
# Altair validates every chart against the Vega-Lite JSON schema when it is
# built and again when it is drawn, which for this page's 3 charts per model
# cost most of a second per render; the specs are the ones Altair would emit.


def interval_spec(title: str, axis: str) -> dict[str, object]:
    """A measured value (dot) and its interval (rule) per upstream, ``axis`` the number format."""
    y = _field("upstream", "nominal", title=None, axis={"labelLimit": 0})
    return {
        "height": 110,
        "layer": [
            {
                "mark": {"type": "rule", "strokeWidth": 3},
                "encoding": {
                    "x": _field("low", "quantitative", title=title, axis={"format": axis}),
                    "x2": {"field": "high"},
                    "y": y,
                },
            },
            {
                "mark": {"type": "point", "filled": True, "size": 90},
                "encoding": {
                    "x": _field("value", "quantitative"),
                    "y": y,
                    "tooltip": [
                        _tip("upstream", "nominal", "upstream"),
                        _tip("value", "quantitative", "measured", axis),
                        _tip("low", "quantitative", "interval from", axis),
                        _tip("high", "quantitative", "interval to", axis),
                    ],
                },
            },
        ],
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
    columns = st.columns(len(measures))
    for column, (measure, low, high, title, axis) in zip(columns, measures, strict=True):
        frame = pd.DataFrame(
            [_interval(verdict, who, measure, low, high) for who in ("pinned", "best")]
        ).astype({"value": float, "low": float, "high": float})
        column.vega_lite_chart(frame, interval_spec(title, axis), width="stretch")
    st.caption(
        f"Effective cost per million input tokens: pinned "
        f"{fmt.money(verdict['pinned_cost_per_mtok'])}, best alternative "
        f"{fmt.money(verdict['best_cost_per_mtok'])}; sticky cache hit rates "
        f"{fmt.rate(verdict['pinned_hit_rate'])} and {fmt.rate(verdict['best_hit_rate'])}."
    )
    if not fmt.missing(verdict["recommendation"]):
        st.text("provider object to send: " + str(verdict["recommendation"]))


def scorecard_spec(card: pd.DataFrame) -> dict[str, object]:
    """Error rate against p95 latency per upstream, sized by attempts (its sample)."""
    # Scale padding keeps the largest dots inside the plot; short titles fit at 390 px
    # (d3's bare "%" prints six decimals: ".0%").
    y = _field("error_rate", "quantitative", title="error rate", scale={"padding": 14},
               axis={"format": ".1%", "tickMinStep": 0.001})  # fmt: skip
    if card["error_rate"].fillna(0).eq(0).all():
        y = _field("error_rate", "quantitative", title="error rate", scale={"padding": 14},
                   axis={"values": [0], "labelExpr": "'none failed'"})  # fmt: skip
    return {
        "height": 260,
        "mark": {"type": "circle", "opacity": 0.8},
        "encoding": {
            "x": _field("p95_latency_ms", "quantitative", title="p95 latency (ms)",
                        scale={"padding": 14}, axis={"format": ",.0f"}),
            "y": y,
            "size": _field("attempts", "quantitative", title="attempts",
                           legend={"orient": "bottom"}),
            "color": _field("upstream", "nominal", title="upstream",
                            legend={"orient": "bottom", "columns": 1, "labelLimit": 0}),
            "tooltip": [
                _tip("upstream", "nominal", "upstream"),
                _tip("attempts", "quantitative", "attempts", ","),
                _tip("error_rate", "quantitative", "error rate", ".1%"),
                _tip("p95_latency_ms", "quantitative", "p95 latency (ms)", ",.0f"),
                _tip("token_hit_rate", "quantitative", "token hit rate", ".1%"),
                _tip("sessions_pinned", "quantitative", "sessions pinned", ","),
            ],
        },
    }  # fmt: skip


def scorecard_frame(card: pd.DataFrame) -> pd.DataFrame:
    """The columns the scorecard chart draws, upstreams labelled upstream vs direct."""
    columns = ["upstream", "attempts", "error_rate", "p95_latency_ms", "token_hit_rate",
               "sessions_pinned"]  # fmt: skip
    return card[columns].assign(upstream=card["upstream"].map(charts.upstream_label))


def model_section(model: str, card: pd.DataFrame, verdict: pd.DataFrame) -> None:
    st.header(fmt.plain(model), divider="gray")  # a model name is data, never Markdown
    if not verdict.empty:
        row = verdict.iloc[0]
        show_verdict(row)
        evidence(row)
    card = card.rename(columns={"cost_per_mtok_input": "cost_per_mtok_input_usd"})
    st.vega_lite_chart(scorecard_frame(card), scorecard_spec(card), width="stretch")
    st.caption("Upstreams OpenRouter named are marked as such; a provider called directly "
               "is marked direct.")  # fmt: skip
    fmt.table(card, f"upstream_scorecard_{model}", columns=SCORECARD_COLUMNS)


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
