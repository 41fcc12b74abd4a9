"""Stickiness: per agent, with vs without the session key; agent → sessions → attempts."""

from __future__ import annotations

import dataclasses

import altair as alt
import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from dashboards import charts, data, filters, fmt, notices, summary
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
    cols[1].metric("Stickiness without key", fmt.rate(sticky[False]), help=summary.NO_KEY_HELP)
    cols[2].metric("Sessions with key", fmt.count(sessions[True]))
    cols[3].metric("Sessions without key", fmt.count(sessions[False]))  # fmt: skip


def per_agent(frame: pd.DataFrame) -> None:
    st.subheader("Per agent and model")
    shown = fmt.printable_text(summary.label_key_sent(summary.fill_agent(frame)))
    shown["agent and model"] = shown["actor_id"] + " · " + shown["requested_model"]
    left, right = st.columns(2)
    for column, measure in zip((left, right), ("stickiness", "pinned_session_share"),
                               strict=True):  # fmt: skip
        base = alt.Chart(shown).encode(
            y=alt.Y("agent and model:N", title=None, axis=alt.Axis(labelLimit=260)),
            yOffset=alt.YOffset("session key:N", sort=["sent", "not sent"]),
        )
        bars = base.mark_bar().encode(
            x=alt.X(f"{measure}:Q", title=fmt.label(measure),
                    axis=alt.Axis(format="%", values=[0, 0.25, 0.5, 0.75, 1]),
                    scale=alt.Scale(domain=[0, 1.15])),
            color=alt.Color("session key:N", sort=["sent", "not sent"],
                            legend=alt.Legend(orient="bottom")),
            tooltip=[alt.Tooltip("actor_id:N", title="agent"),
                     alt.Tooltip("requested_model:N", title="model"),
                     alt.Tooltip("session key:N", title="session key"),
                     alt.Tooltip(f"{measure}:Q", title=fmt.label(measure), format=".1%"),
                     alt.Tooltip("sessions:Q", title="sessions", format=",")],
        )  # fmt: skip
        counts = base.mark_text(align="left", dx=3, fontSize=10, color="#555").encode(
            x=f"{measure}:Q", text=alt.Text("sessions:Q", format=",")
        )
        column.altair_chart(alt.layer(bars, counts).properties(height=alt.Step(12)),
                            width="stretch")  # fmt: skip
    st.caption("The number beside each bar is its sample: sessions.")
    fmt.table(frame, "agent_stickiness", columns=AGENT_COLUMNS)


def timeline_chart(attempts: pd.DataFrame, moves: pd.DataFrame) -> alt.LayerChart:
    """The session's attempts on a 24-hour UTC axis spanning the session (not the day)."""
    domain = charts.padded([*attempts["started_at"], *moves["started_at"]])
    span = domain[1] - domain[0]
    attempts = fmt.printable_text(charts.with_utc_text(attempts, "started_at"))
    attempts["upstream"] = attempts["upstream"].map(charts.upstream_label)
    moves = fmt.printable_text(charts.with_utc_text(moves, "started_at"))
    x = charts.time_x("started_at", span, domain=domain)
    points = (
        alt.Chart(attempts)
        .mark_point(filled=True, size=120)
        .encode(
            x=x,
            y=alt.Y("upstream:N", title="upstream", axis=alt.Axis(labelLimit=220)),
            color=alt.Color("upstream:N", legend=None),
            shape=alt.Shape("status:N", title="status",
                            scale=alt.Scale(domain=["ok", "error"], range=["circle", "cross"]),
                            legend=alt.Legend(orient="bottom")),
            tooltip=[charts.time_tip("started_at"), alt.Tooltip("upstream:N", title="upstream"),
                     alt.Tooltip("status:N", title="status"),
                     alt.Tooltip("attempt:Q", title="attempt"),
                     alt.Tooltip("input_tokens:Q", title="input tokens", format=","),
                     alt.Tooltip("cache_read_tokens:Q", title="cache-read tokens", format=","),
                     alt.Tooltip("latency_ms:Q", title="latency (ms)", format=",.0f")],
        )
    )  # fmt: skip
    rules = (
        alt.Chart(moves)
        .mark_rule(strokeDash=[4, 3], strokeWidth=2)
        .encode(
            x=x,
            color=alt.Color("move:N", scale=alt.Scale(domain=["switch", "idle release"],
                                                      range=["#d62728", "#7f7f7f"]),
                            title="marked", legend=alt.Legend(orient="bottom")),
            tooltip=[charts.time_tip("started_at"), alt.Tooltip("move:N", title="move"),
                     alt.Tooltip("previous_upstream:N", title="from"),
                     alt.Tooltip("upstream:N", title="to"),
                     alt.Tooltip("gap_s:Q", format=",.0f", title="gap (s)")],
        )
    )  # fmt: skip
    layered: alt.LayerChart = alt.layer(rules, points).resolve_scale(color="independent")
    return layered.properties(height=260)


def _picked(key: str) -> int | None:
    """The row picked in the selectable table ``key`` (``None`` before any click)."""
    state = st.session_state.get(key)
    rows = state.get("selection", {}).get("rows", []) if state else []
    return int(rows[0]) if rows else None


def _agents(frame: pd.DataFrame) -> pd.DataFrame:
    grouped = (
        summary.fill_agent(frame)
        .groupby("actor_id", as_index=False)[["sessions", "calls", "switches", "idle_releases"]]
        .sum()
    )
    return grouped.sort_values(["switches", "calls"], ascending=False).reset_index(drop=True)


def drill_down(chosen: Filters, frame: pd.DataFrame) -> None:
    """Agent -> its sessions -> one session's attempts: a click on a row at each step."""
    st.subheader("Drill down: agent → sessions → attempts")
    scope = f"{abs(hash(chosen)):x}"  # a new filter starts a new drill-down: no stale picks
    agents = _agents(frame)
    st.caption("Click an agent, then one of its sessions (most switches first).")
    fmt.table(agents, "drill_agents", select_key=f"drill_agent_{scope}")
    row = _picked(f"drill_agent_{scope}")
    agent = None if row is None or row >= len(agents) else str(agents.iloc[row]["actor_id"])
    narrowed = chosen if agent is None or agent == "(no agent)" else dataclasses.replace(
        chosen, actors=(agent,))  # fmt: skip
    sessions = data.load("top_sessions", narrowed)
    if sessions.empty:
        st.info("No session with a served call matches the filters.")
        return
    st.markdown(f"**Sessions of {fmt.plain(agent)}**" if agent else "**Sessions, every agent**")
    columns = ["session_id", "actor_id", "requested_model", "key_sent", "calls", "switches",
               "idle_releases", "stickiness"]  # fmt: skip
    fmt.table(sessions, "drill_sessions", columns=columns,
              select_key=f"drill_session_{scope}_{agent}")  # fmt: skip
    picked = _picked(f"drill_session_{scope}_{agent}")
    session(chosen, sessions.iloc[picked if picked is not None and picked < len(sessions) else 0])


def session(chosen: Filters, row: pd.Series) -> None:
    actor = row["actor_id"] if isinstance(row["actor_id"], str) else None
    key = (str(row["session_id"]), actor, str(row["requested_model"]))
    attempts = data.load("session_attempts", chosen, *key)
    moves = data.load("session_moves", chosen, *key)
    st.markdown(f"**Session {fmt.plain(row['session_id'])}** · {fmt.plain(fmt.text(actor))} · "
                f"{fmt.plain(row['requested_model'])}")  # fmt: skip
    cols = st.columns(3)
    cols[0].metric("Session stickiness", fmt.rate(row["stickiness"]))
    cols[1].metric("Switches", fmt.count(row["switches"]))
    cols[2].metric("Idle releases", fmt.count(row["idle_releases"]))
    st.altair_chart(timeline_chart(attempts, moves), width="stretch")
    st.caption(
        "Each point is an attempt, coloured by upstream (crosses failed). Red rules mark "
        "switches within the idle window; grey rules mark idle releases (the pin had expired)."
    )
    st.markdown("**The session's attempts**")
    fmt.table(attempts, "session_attempts")


def main() -> None:
    st.title("Sticky routing")
    chosen = filters.current()
    frame = data.load("agent_stickiness", chosen)
    if frame.empty:
        notices.show_no_match()
        return
    headline(frame)
    per_agent(frame)
    drill_down(chosen, frame)


main()
