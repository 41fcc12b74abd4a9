"""Budgets: each configured budget's burn today, the projected end-of-day spend, the
agents and models closest to their limits, and the burn over the last two weeks.

The budgets come from the same file ``ledger budget check`` reads (see
:mod:`ledger.budgets.config`); the figures from :mod:`ledger.budgets.status`,
over the analytics layer. The sidebar filters do not apply: a budget has its
own scope.
"""

from __future__ import annotations

import datetime as dt

import altair as alt
import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from dashboards import data, fmt
from ledger.budgets.config import BudgetConfig, load_config
from ledger.budgets.status import BudgetStatus, budget_status, burn_history
from ledger.errors import BudgetConfigurationError

EXAMPLE = """[tool.ledger.budgets.planner_daily]   # in pyproject.toml
kind = "agent_day"
agent = "planner"
limit_usd = 5

[tool.ledger.budgets.turn]
kind = "turn"
mean_usd = 0.02
p95_usd = 0.05"""


def _config() -> BudgetConfig | None:
    try:
        return load_config()
    except BudgetConfigurationError as exc:
        if exc.key == "tool.ledger.budgets" and exc.path == "<budgets>":
            st.info(
                "No budgets are configured. Add a `[tool.ledger.budgets]` table to the "
                "project's pyproject.toml (or `[budgets]` to a ledger.toml), for example:"
            )
            st.code(EXAMPLE, language="toml")
        else:
            st.error(f"The budgets file cannot be used: {exc}")
        return None


def _moment() -> dt.datetime:
    """The end of the chosen UTC day, or now when it is today (default: the ledger's last day)."""
    now = dt.datetime.now(dt.UTC)
    last = data.options().last_at
    default = (last.astimezone(dt.UTC) if last else now).date()
    day = st.date_input("Day (UTC)", value=default, key="budgets_day")
    if not isinstance(day, dt.date) or day >= now.date():
        return now
    return dt.datetime.combine(day, dt.time.max, dt.UTC)  # the whole of a past day


def _frame(lines: list[BudgetStatus]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "budget": [s.budget for s in lines],
            "metric": [s.metric for s in lines],
            "subject": [s.subject for s in lines],
            "limit_usd": [s.limit_usd for s in lines],
            "spent_usd": [s.spent_usd for s in lines],
            "projected_usd": [s.projected_usd for s in lines],
            "used_share": [s.used for s in lines],
            "unknown_cost_rows": [s.unknown_cost_rows for s in lines],
        }
    )


def headline(lines: list[BudgetStatus], day: dt.date, today: bool) -> None:
    cols = st.columns(3)
    cols[0].metric("Budget lines today" if today else f"Budget lines on {day:%b %d}",
                   fmt.count(len(lines)))  # fmt: skip
    over = sum(1 for s in lines if s.used > 1)
    cols[1].metric("Over or projected over", fmt.count(over))
    if lines:
        top = lines[0]
        label = f"{top.budget} · {top.subject}" if top.subject else f"{top.budget} · {top.metric}"
        cols[2].metric("Closest to its limit", fmt.rate(top.used), help=fmt.plain(label))
        st.caption(f"Closest to its limit: **{fmt.plain(label)}**")


def closest(lines: list[BudgetStatus]) -> None:
    st.subheader("Agents and models closest to their limits")
    subjects = _frame([s for s in lines if s.subject is not None][:10])
    if subjects.empty:
        st.info("No agent or model has spent under a per-day budget on this day.")
        return
    labels = subjects["budget"] + " · " + subjects["subject"]
    shown = fmt.printable_text(subjects.assign(label=labels))  # agents and models: ledger text
    shown["used_text"] = shown["used_share"].map(fmt.rate)
    base = alt.Chart(shown).encode(
        y=alt.Y("label:N", sort="-x", title=None, axis=alt.Axis(labelLimit=240))
    )
    bars = base.mark_bar().encode(
        x=alt.X("used_share:Q", title="share of the limit (projection included)",
                axis=alt.Axis(format="%"), scale=alt.Scale(domainMin=0)),
        color=alt.condition("datum.used_share > 1", alt.value("#d62728"), alt.value("#4c78a8")),
        tooltip=[alt.Tooltip("label:N", title="budget"),
                 alt.Tooltip("used_share:Q", title="share of the limit", format=".1%")],
    )  # fmt: skip
    labels = base.mark_text(align="left", dx=4, fontSize=11).encode(
        x="used_share:Q", text="used_text:N"
    )
    limit = alt.Chart(pd.DataFrame({"x": [1.0]})).mark_rule(color="#d62728", strokeDash=[4, 4])
    st.altair_chart(
        alt.layer(bars, labels, limit.encode(x="x:Q")).properties(height=40 + 24 * len(subjects)),
        width="stretch",
    )
    st.caption("The dashed red line is the limit (100%).")


def history(frame: pd.DataFrame) -> None:
    st.subheader("Burn over the last 14 days")
    if frame.empty:
        st.info("Nothing was spent under these budgets in the last 14 days.")
        return
    names = sorted(frame["budget"].unique())
    chosen = st.selectbox("Budget", names, key="budgets_history")
    part = fmt.printable_text(frame[frame["budget"] == chosen])  # subjects: ledger text
    for col in ("actual_usd", "limit_usd"):
        part[col] = pd.to_numeric(part[col].map(lambda v: None if v is None else float(v)))
    part["day"] = pd.to_datetime(part["day"], utc=True)
    part["day_text"] = part["day"].dt.strftime("%Y-%m-%d")
    lines = (
        alt.Chart(part)
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "day:T", title="UTC day", axis=alt.Axis(labelExpr="utcFormat(datum.value, '%b %d')")
            ),
            y=alt.Y("actual_usd:Q", title="spend", axis=alt.Axis(format="$,.2f")),
            color=alt.Color("subject:N", title=None, legend=alt.Legend(orient="bottom")),
            tooltip=[
                alt.Tooltip("subject:N", title="subject"),
                alt.Tooltip("day_text:N", title="UTC day"),
                alt.Tooltip("actual_usd:Q", title="spend", format="$,.2f"),
            ],
        )
    )
    limit = alt.Chart(part).mark_rule(color="#d62728", strokeDash=[4, 4]).encode(y="limit_usd:Q")
    st.altair_chart((lines + limit).properties(height=260), width="stretch")
    st.caption("The dashed red line is the budget's limit.")


def main() -> None:
    st.title("Budgets")
    config = _config()
    if config is None:
        return
    st.caption(f"From `{config.source}`. Days are UTC; the sidebar filters do not apply here.")
    url = data.ledger_url()
    data.data_version(url)  # sync new ledger rows first
    analytics = data.analytics_for(url)
    at = _moment()
    lines = budget_status(analytics, config, at=at)
    today = at.date() >= dt.datetime.now(dt.UTC).date()
    headline(lines, at.date(), today)
    st.subheader(f"{at.date()} (UTC), closest to the limit first")
    if lines:
        fmt.table(_frame(lines), "budget_status")
    else:
        st.info("Nothing was spent under any budget on this day.")
    closest(lines)
    history(burn_history(analytics, config, at=at))


main()
