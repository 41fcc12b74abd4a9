"""The verdict strip: one row per model answering "should it pin an upstream with provider.order?".

Shown at the top of the landing page and of the upstreams page, warranted
first: a badge (Warranted / Not warranted / Insufficient data / Does not
apply), the pinned upstream and the recommended one, the difference that
decided it, the share of sessions affected, the monthly dollar effect, and the
``provider`` JSON to paste (``st.code`` has a copy button).

The ``provider_order_verdict`` view grows columns over time (``headline``,
``recommendation``, ``monthly_effect_usd``…); the strip shows those the view
has and leaves out the rest. Every string from the ledger goes through
:func:`dashboards.fmt.plain` or a plain-text element: never Markdown.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from dashboards import fmt

#: verdict value -> (badge text, badge colour); the order is the strip's.
BADGES: Final[dict[str, tuple[str, str]]] = {
    "warranted": ("Warranted", "red"),
    "not_warranted": ("Not warranted", "green"),
    "insufficient_data": ("Insufficient data", "orange"),
    "does_not_apply": ("Does not apply", "gray"),
}


@dataclass(frozen=True)
class VerdictRow:
    """What the strip shows for one model, every field plain text or ``None``."""

    model: str
    verdict: str
    badge: str
    colour: str
    route: str
    difference: str | None
    headline: str | None
    sessions: str | None
    monthly: str | None
    recommendation: str | None
    reason: str


def _get(row: dict[str, Any], column: str) -> Any:
    value = row.get(column)
    return None if fmt.missing(value) else value


def ordered(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Warranted first, then not warranted, insufficient data, does not apply; by model."""
    rank = {name: i for i, name in enumerate(BADGES)}
    keyed = verdicts.assign(_rank=verdicts["verdict"].map(lambda v: rank.get(str(v), len(rank))))
    return keyed.sort_values(["_rank", "requested_model"]).drop(columns="_rank")


def seconds(ms: Any) -> str:
    return f"{float(ms) / 1000:.1f} s"


def difference(row: dict[str, Any]) -> str | None:
    """``errors 18.0% vs 0.5%, p95 3.0 s vs 1.0 s``: pinned vs best, on what was judged worse
    (both measures when neither was); error rates only when they were observable."""
    parts: dict[str, str] = {}
    flag = _get(row, "error_rates_observable")
    observable = flag is None or bool(flag)
    pinned_e, best_e = _get(row, "pinned_error_rate"), _get(row, "best_error_rate")
    if observable and pinned_e is not None and best_e is not None:
        parts["errors"] = f"errors {fmt.rate(pinned_e)} vs {fmt.rate(best_e)}"
    pinned_p, best_p = _get(row, "pinned_p95_ms"), _get(row, "best_p95_ms")
    if pinned_p is not None and best_p is not None:
        parts["latency"] = f"p95 {seconds(pinned_p)} vs {seconds(best_p)}"
    pinned_c, best_c = _get(row, "pinned_cost_per_mtok"), _get(row, "best_cost_per_mtok")
    if pinned_c is not None and best_c is not None:
        parts["cost"] = f"${float(pinned_c):.2f} vs ${float(best_c):.2f} per Mtok input"
    flags = (("errors", "errors_worse"), ("latency", "latency_worse"), ("cost", "cost_worse"))
    worse = [k for k, flag in flags if bool(_get(row, flag)) and k in parts]
    # nothing judged worse: the two measures a reader weighs first, not the price
    chosen = [parts[k] for k in (worse or [k for k in ("errors", "latency") if k in parts])]
    return ", ".join(chosen) if chosen else None


def _route(row: dict[str, Any], recommended: list[str]) -> str:
    pinned = _get(row, "pinned_upstream")
    best = recommended[0] if recommended else _get(row, "best_upstream")
    if pinned is None:
        return "no pinned upstream"
    verdict = str(row["verdict"])
    ignored = _get(row, "worse_upstreams")
    if verdict == "warranted" and not recommended and ignored:
        # an ignore: the sessions spread over the upstreams left, not to one of them
        return f"ignore {fmt.printable(ignored)}; sticky routing continues over the rest"
    if verdict == "warranted" and best is not None:
        return f"{fmt.printable(pinned)} → {fmt.printable(best)}"
    if verdict == "not_warranted":
        return f"{fmt.printable(pinned)} (keep sticky routing)"
    return f"pinned: {fmt.printable(pinned)}"


def _recommendation(row: dict[str, Any]) -> tuple[str | None, list[str]]:
    """The ``provider`` JSON pretty-printed, and the upstream order it names."""
    text = _get(row, "recommendation")
    if text is None:
        return None, []
    try:
        parsed = json.loads(str(text))
    except ValueError:
        return fmt.printable(text), []
    order = parsed.get("order", []) if isinstance(parsed, dict) else []
    pretty = json.dumps({"provider": parsed}, indent=2, ensure_ascii=True)
    return pretty, [str(u) for u in order if isinstance(u, str)]


def monthly(value: Any) -> str | None:
    if value is None:
        return None
    amount = float(value)
    if amount < 0:
        return f"saves {fmt.dollars(-amount)} a month"
    if amount > 0:
        return f"costs {fmt.dollars(amount)} more a month"
    return "no change in spend"


def verdict_row(row: dict[str, Any]) -> VerdictRow:
    verdict = str(row["verdict"])
    badge, colour = BADGES.get(verdict, (verdict.replace("_", " ").capitalize(), "gray"))
    recommendation, order = _recommendation(row)
    share = _get(row, "sessions_affected_share")
    headline = _get(row, "headline")
    return VerdictRow(
        model=fmt.printable(row["requested_model"]),
        verdict=verdict,
        badge=badge,
        colour=colour,
        route=_route(row, order),
        difference=difference(row),
        headline=None if headline is None else fmt.printable(headline),
        sessions=None if share is None else f"{fmt.rate(share)} of sessions affected",
        monthly=monthly(_get(row, "monthly_effect_usd")),
        recommendation=recommendation,
        reason=fmt.printable(fmt.text(_get(row, "reason"))),
    )


def rows(verdicts: pd.DataFrame) -> list[VerdictRow]:
    return [verdict_row(r) for r in ordered(verdicts).to_dict("records")]


def show_row(item: VerdictRow) -> None:
    with st.container(border=True, key=None):
        left, middle, right = st.columns([3, 4, 4])
        with left:
            st.badge(item.badge, color=item.colour)  # type: ignore[arg-type]
            st.markdown(f"**{fmt.plain(item.model)}**")
        with middle:  # ledger text: st.text never parses Markdown or HTML
            st.text(item.route)
            facts = [x for x in (item.difference, item.sessions, item.monthly) if x]
            if facts:
                st.text(" · ".join(facts))
            if item.headline:
                st.text(item.headline)
        with right:
            if item.recommendation:
                st.code(item.recommendation, language="json")
            with st.expander("Why: the figures behind it"):
                st.text(item.reason)


def strip(verdicts: pd.DataFrame) -> None:
    """The strip (or a line saying there is no model to judge yet)."""
    st.subheader("provider.order verdict per model")
    if verdicts.empty:
        st.info("No model has calls under these filters yet.")
        return
    for item in rows(verdicts):
        show_row(item)
