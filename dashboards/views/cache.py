"""Cache: prompt-cache hit rates by agent, upstream and key sent; decay with idle gaps."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from dashboards import data, filters, fmt, state, summary
from ledger.analytics import Filters

KEY_COLORS = alt.Color("session key:N", sort=["sent", "not sent"])


def headline(by_agent: pd.DataFrame) -> None:
    hits = summary.hit_rate_by_key(by_agent)
    cols = st.columns(4)
    cols[0].metric(
        "Token hit rate with key",
        fmt.rate(hits[True]),
        help="Cache-read tokens / input tokens over served attempts.",
    )
    cols[1].metric("Token hit rate without key", fmt.rate(hits[False]))
    cols[2].metric(
        "Call hit rate",
        fmt.rate(summary.call_hit_rate(by_agent)),
        help="Served attempts that read the prompt cache.",
    )
    cols[3].metric("Response-cache hits", fmt.count(int(by_agent["response_cache_hits"].sum())))


def rate_bars(frame: pd.DataFrame, category: str, title: str) -> alt.Chart:
    shown = summary.label_key_sent(frame)
    melted = shown.melt(
        id_vars=[category, "session key"],
        value_vars=["token_hit_rate", "call_hit_rate"],
        var_name="rate",
    )
    return (
        alt.Chart(melted)
        .mark_bar()
        .encode(
            x=alt.X(f"{category}:N", title=title),
            xOffset="session key:N",
            y=alt.Y("value:Q", title=None, axis=alt.Axis(format="%")),
            color=KEY_COLORS,
            column=alt.Column("rate:N", title=None),
            tooltip=[f"{category}:N", "session key:N", "rate:N",
                     alt.Tooltip("value:Q", format=".1%")],
        )
        .properties(width=320, height=220)
    )  # fmt: skip


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
            tooltip=["idle_gap:N", "session key:N", "calls:Q",
                     alt.Tooltip("token_hit_rate:Q", format=".1%"),
                     alt.Tooltip("call_hit_rate:Q", format=".1%")],
        )
        .properties(height=260)
    )  # fmt: skip
    st.caption("OpenRouter's sticky pin expires after 10 minutes idle; provider prompt caches "
               "also expire (typically 5–60 minutes).")  # fmt: skip
    fmt.table(frame.drop(columns=["gap_order", "gap_from_s", "gap_to_s"]), "cache_decay_by_key")


def main() -> None:
    st.title("Prompt-cache hits")
    chosen = filters.current()
    by_agent = data.load("cache_hits_by_agent", chosen)
    if by_agent.empty:
        state.show_no_match()
        return
    detail = data.load("cache_hits", chosen)
    headline(by_agent)
    st.subheader("By agent")
    st.altair_chart(rate_bars(summary.fill_agent(by_agent), "actor_id", "agent"))
    fmt.table(by_agent, "cache_hits_by_agent")
    st.subheader("By upstream")
    upstreams = summary.by_upstream(detail)
    st.altair_chart(rate_bars(upstreams, "upstream", "upstream"))
    fmt.table(upstreams, "cache_hits_by_upstream")
    decay(chosen)


main()
