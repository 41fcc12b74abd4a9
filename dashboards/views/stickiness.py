"""Stickiness: per agent, with vs without the session key; one session on a timeline."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from dashboards import data, filters, fmt, state, summary
from ledger.analytics import Filters

AGENT_COLUMNS = [
    "actor_id", "requested_model", "key_sent", "sessions", "calls", "transitions",
    "switches", "idle_releases", "stickiness", "pinned_session_share", "avg_distinct_upstreams",
]  # fmt: skip


def headline(frame: pd.DataFrame) -> None:
    sticky = summary.stickiness_by_key(frame)
    sessions = summary.sessions_by_key(frame)
    cols = st.columns(4)
    cols[0].metric(
        "Stickiness with key",
        fmt.rate(sticky[True]),
        help="1 − switches / transitions within the idle window, sessions sent a key.",
    )
    cols[1].metric("Stickiness without key", fmt.rate(sticky[False]))
    cols[2].metric("Sessions with key", fmt.count(sessions[True]))
    cols[3].metric("Sessions without key", fmt.count(sessions[False]))  # fmt: skip


def per_agent(frame: pd.DataFrame) -> None:
    st.subheader("Per agent and model")
    shown = summary.label_key_sent(summary.fill_agent(frame))
    melted = shown.melt(
        id_vars=["actor_id", "requested_model", "session key"],
        value_vars=["stickiness", "pinned_session_share"],
        var_name="measure",
    )
    st.altair_chart(
        alt.Chart(melted)
        .mark_bar()
        .encode(
            x=alt.X("actor_id:N", title="agent"),
            xOffset="session key:N",
            y=alt.Y("value:Q", title=None, axis=alt.Axis(format="%"),
                    scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("session key:N", sort=["sent", "not sent"]),
            column=alt.Column("measure:N", title=None),
            tooltip=["actor_id:N", "requested_model:N", "session key:N", "measure:N",
                     alt.Tooltip("value:Q", format=".1%")],
        )
        .properties(width=320, height=240)
    )  # fmt: skip
    fmt.table(frame, "agent_stickiness", columns=AGENT_COLUMNS)


def _session_label(row: pd.Series) -> str:
    agent = row["actor_id"] if isinstance(row["actor_id"], str) else "(no agent)"
    key = "key" if row["key_sent"] else "no key"
    return (
        f"{row['session_id']} · {agent} · {row['requested_model']} · {key} · "
        f"{int(row['calls'])} calls, {int(row['switches'])} switches, "
        f"{int(row['idle_releases'])} idle releases"
    )


def timeline_chart(attempts: pd.DataFrame, moves: pd.DataFrame) -> alt.LayerChart:
    points = (
        alt.Chart(attempts)
        .mark_point(filled=True, size=120)
        .encode(
            x=alt.X("started_at:T", title="time (UTC)"),
            y=alt.Y("upstream:N", title="upstream"),
            color=alt.Color("upstream:N", legend=None),
            shape=alt.Shape("status:N", scale=alt.Scale(domain=["ok", "error"],
                                                        range=["circle", "cross"])),
            tooltip=["started_at:T", "upstream:N", "status:N", "attempt:Q", "key_sent:N",
                     "cache_read_tokens:Q", "input_tokens:Q", "latency_ms:Q"],
        )
    )  # fmt: skip
    rules = (
        alt.Chart(moves)
        .mark_rule(strokeDash=[4, 3], strokeWidth=2)
        .encode(
            x="started_at:T",
            color=alt.Color("move:N", scale=alt.Scale(domain=["switch", "idle release"],
                                                      range=["#d62728", "#7f7f7f"]),
                            title="marked"),
            tooltip=["started_at:T", "move:N", "previous_upstream:N", "upstream:N",
                     alt.Tooltip("gap_s:Q", format=".0f", title="gap (s)")],
        )
    )  # fmt: skip
    return alt.layer(rules, points).resolve_scale(color="independent").properties(height=260)


def drill_down(chosen: Filters) -> None:
    st.subheader("One session, call by call")
    sessions = data.load("top_sessions", chosen)
    if sessions.empty:
        st.info("No session with a served call matches the filters.")
        return
    labels = [_session_label(row) for _, row in sessions.iterrows()]
    picked = st.selectbox(
        "Session (most switches first)", range(len(labels)), format_func=labels.__getitem__,
        key="stickiness_session",
    )  # fmt: skip
    row = sessions.iloc[picked or 0]
    actor = row["actor_id"] if isinstance(row["actor_id"], str) else None
    key = (str(row["session_id"]), actor, str(row["requested_model"]))
    attempts = data.load("session_attempts", chosen, *key)
    moves = data.load("session_moves", chosen, *key)
    cols = st.columns(3)
    cols[0].metric("Session stickiness", fmt.rate(row["stickiness"]))
    cols[1].metric("Switches", fmt.count(row["switches"]))
    cols[2].metric("Idle releases", fmt.count(row["idle_releases"]))
    st.altair_chart(timeline_chart(attempts, moves))
    st.caption(
        "Each point is an attempt, coloured by upstream (crosses failed). Red rules mark "
        "switches within the idle window; grey rules mark idle releases (the pin had expired)."
    )
    with st.expander("The session's attempts"):
        fmt.table(attempts, "session_attempts")


def main() -> None:
    st.title("Sticky routing")
    chosen = filters.current()
    frame = data.load("agent_stickiness", chosen)
    if frame.empty:
        state.show_no_match()
        return
    headline(frame)
    per_agent(frame)
    drill_down(chosen)


main()
