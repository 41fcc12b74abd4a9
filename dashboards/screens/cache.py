"""Cache: prompt-cache hit rates by agent, upstream and key sent; decay with idle gaps;
whether caching pays and the cache lifetime to choose."""

from __future__ import annotations

import altair as alt
import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from dashboards import charts, data, filters, fmt, notices, summary
from ledger.analytics import Filters

KEY_COLORS = alt.Color(
    "session key:N", sort=["sent", "not sent"], legend=alt.Legend(orient="bottom")
)
RATES = {"token_hit_rate": "token hit rate", "call_hit_rate": "call hit rate"}


def headline(by_agent: pd.DataFrame) -> None:
    hits = summary.hit_rate_by_key(by_agent)
    cols = st.columns(4)
    cols[0].metric(
        "Token hit rate with key",
        fmt.rate(hits[True]),
        help="Cache-read tokens / input tokens over served attempts.",
    )
    cols[1].metric("Token hit rate without key", fmt.rate(hits[False]), help=summary.NO_KEY_HELP)
    cols[2].metric(
        "Call hit rate",
        fmt.rate(summary.call_hit_rate(by_agent)),
        help="Served attempts that read the prompt cache.",
    )
    cols[3].metric("Response-cache hits", fmt.count(int(by_agent["response_cache_hits"].sum())))


def rate_bars(frame: pd.DataFrame, category: str, rate: str) -> alt.LayerChart | alt.FacetChart:
    """``rate`` per ``category`` with and without the key, as horizontal bars (they stay
    readable on a phone); each bar labelled with its sample (calls), so a 5-call bar does
    not pass for a 5,000-call one."""
    shown = fmt.printable_text(summary.label_key_sent(frame))
    title = fmt.label(category)
    base = alt.Chart(shown).encode(
        y=alt.Y(f"{category}:N", title=title, axis=alt.Axis(labelLimit=180)),
        yOffset=alt.YOffset("session key:N", sort=["sent", "not sent"]),
    )
    bars = base.mark_bar().encode(
        x=alt.X(f"{rate}:Q", title=RATES[rate], axis=alt.Axis(format="%",
                values=[0, 0.25, 0.5, 0.75, 1]), scale=alt.Scale(domain=[0, 1.2])),
        color=KEY_COLORS,
        tooltip=[alt.Tooltip(f"{category}:N", title=title),
                 alt.Tooltip("session key:N", title="session key"),
                 alt.Tooltip(f"{rate}:Q", title=RATES[rate], format=".1%"),
                 alt.Tooltip("calls:Q", title="calls", format=",")],
    )  # fmt: skip
    counts = base.mark_text(align="left", dx=3, fontSize=10, color="#555").encode(
        x=alt.X(f"{rate}:Q"), text=alt.Text("calls:Q", format=",")
    )
    return alt.layer(bars, counts).properties(height=alt.Step(12))


def rate_pair(frame: pd.DataFrame, category: str) -> None:
    """Token and call hit rates side by side (stacked on a narrow screen)."""
    left, right = st.columns(2)
    for column, rate in zip((left, right), RATES, strict=True):
        column.altair_chart(rate_bars(frame, category, rate), width="stretch")
    st.caption("The number beside each bar is its sample: served calls.")


def decay(chosen: Filters) -> None:
    st.subheader("How the hit rate decays with idle time")
    frame = data.load("cache_decay_by_key", chosen)
    if frame.empty:
        st.info("No session has two served calls under these filters.")
        return
    shown = summary.label_key_sent(frame)
    gaps = list(dict.fromkeys(frame.sort_values("gap_order")["idle_gap"]))
    st.altair_chart(
        alt.Chart(shown)
        .mark_line(point=True)
        .encode(
            x=alt.X("idle_gap:N", sort=gaps, title="idle gap before the call"),
            y=alt.Y("token_hit_rate:Q", title="token hit rate", axis=alt.Axis(format="%")),
            color=KEY_COLORS,
            size=alt.Size("calls:Q", title="calls", legend=alt.Legend(orient="bottom")),
            tooltip=[alt.Tooltip("idle_gap:N", title="idle gap"),
                     alt.Tooltip("session key:N", title="session key"),
                     alt.Tooltip("calls:Q", title="calls", format=","),
                     alt.Tooltip("token_hit_rate:Q", title="token hit rate", format=".1%"),
                     alt.Tooltip("call_hit_rate:Q", title="call hit rate", format=".1%")],
        )
        .properties(height=260),
        width="stretch",
    )  # fmt: skip
    st.caption("OpenRouter's sticky pin expires after 10 minutes idle; provider prompt caches "
               "also expire (typically 5–60 minutes). Larger points hold more calls.")  # fmt: skip
    fmt.table(frame.drop(columns=["gap_order", "gap_from_s", "gap_to_s"]), "cache_decay_by_key")


ECONOMICS_COLUMNS = [
    "actor_id", "requested_model", "upstream", "cache_write_tokens", "written_read_share",
    "unread_write_cost_usd", "read_saving_usd", "net_effect_usd",
]  # fmt: skip
ADVICE_COLUMNS = [
    "actor_id", "requested_model", "provider", "verdict", "current_ttl", "best_ttl",
    "monthly_effect_usd", "monthly_effect_low_usd", "monthly_effect_high_usd",
    "none_monthly_usd", "ttl_5m_monthly_usd", "ttl_1h_monthly_usd", "gap_p50_s",
    "within_5m_share", "prefix_reuse", "reason",
]  # fmt: skip


def economics(chosen: Filters) -> None:
    """Does caching pay (cache_economics), and which cache lifetime to write with
    (cache_ttl_advice): each ``switch`` as its headline and the setting to paste."""
    st.subheader("Does prompt caching pay?")
    frame = data.load("cache_economics", chosen)
    frame = frame[frame["cache_write_tokens"] + frame["cache_read_tokens"] > 0]
    if frame.empty:
        st.info("No served call read or wrote the prompt cache under these filters.")
        return
    fmt.table(frame, "cache_economics", columns=ECONOMICS_COLUMNS)
    st.caption("A write is read when the session's next call on the same upstream reads it "
               "within its lifetime. Net below zero: caching saved money.")  # fmt: skip
    advice = data.load("cache_ttl_advice", chosen)
    advice = advice[advice["verdict"] != "does_not_apply"]
    if advice.empty:
        return
    st.subheader("Cache lifetime: 5 minutes or 1 hour?")
    for row in advice[advice["verdict"] == "switch"].to_dict("records"):
        # ledger strings are data: plain text, never Markdown
        st.text(f"{row['actor_id']} · {row['requested_model']}: {row['headline']}")
        st.code(str(row["setting"]), language=None)
    fmt.table(advice, "cache_ttl_advice", columns=ADVICE_COLUMNS)


def main() -> None:
    st.title("Prompt-cache hits")
    chosen = filters.current()
    by_agent = data.load("cache_hits_by_agent", chosen)
    if by_agent.empty:
        notices.show_no_match()
        return
    detail = data.load("cache_hits", chosen)
    headline(by_agent)
    st.subheader("By agent")
    rate_pair(summary.fill_agent(by_agent), "actor_id")
    fmt.table(by_agent, "cache_hits_by_agent")
    st.subheader("By upstream")
    upstreams = summary.by_upstream(detail)
    upstreams["upstream"] = upstreams["upstream"].map(charts.upstream_label)
    rate_pair(upstreams, "upstream")
    st.caption("Upstreams OpenRouter named are marked as such; a provider called directly "
               "(a fallback chain's anthropic, say) is marked direct.")  # fmt: skip
    fmt.table(upstreams, "cache_hits_by_upstream")
    decay(chosen)
    economics(chosen)


main()
