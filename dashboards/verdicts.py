"""The verdict strip: one row per model answering "should it pin an upstream with provider.order?".

Shown at the top of the landing page and of the upstreams page, warranted
first: a badge (Warranted / Not warranted / Insufficient data / Does not
apply), the pinned upstream and the recommended one, the difference that
decided it, the share of sessions affected, the monthly dollar effect, and the
``provider`` JSON to paste (``st.code`` has a copy button).

Every phrase is written from the row's typed figures by
:mod:`ledger.analytics.read.verdict_words` (the one place the verdict's words live;
a row missing newer columns reads them as unknown). Every string from the
ledger goes through :func:`dashboards.fmt.plain` or a plain-text element:
never Markdown.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from dashboards import fmt
from ledger.analytics.read import verdict_words as words
from ledger.analytics.read.verdict import Verdict, from_row

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


def ordered(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Warranted first, then not warranted, insufficient data, does not apply; by model."""
    rank = {name: i for i, name in enumerate(BADGES)}
    keyed = verdicts.assign(_rank=verdicts["verdict"].map(lambda v: rank.get(str(v), len(rank))))
    return keyed.sort_values(["_rank", "requested_model"]).drop(columns="_rank")


def _recommendation(verdict: Verdict) -> tuple[str | None, str | None]:
    """The ``provider`` JSON pretty-printed, and the first upstream of an ``order``."""
    if verdict.recommendation is None:
        return None, None
    try:
        parsed = json.loads(verdict.recommendation)
    except ValueError:
        return fmt.printable(verdict.recommendation), None
    order = parsed.get("order", []) if isinstance(parsed, dict) else []
    pretty = json.dumps({"provider": parsed}, indent=2, ensure_ascii=True)
    first = order[0] if order and isinstance(order[0], str) else None
    return pretty, first


def _shown(text: str | None) -> str | None:
    return None if text is None else fmt.printable(text)


def verdict_row(row: dict[str, Any]) -> VerdictRow:
    """The card of one ``provider_order_verdict`` row: every phrase from
    :mod:`ledger.analytics.read.verdict_words`, made printable."""
    verdict = from_row(row)
    badge, colour = BADGES.get(
        verdict.verdict, (verdict.verdict.replace("_", " ").capitalize(), "gray")
    )
    recommendation, first = _recommendation(verdict)
    return VerdictRow(
        model=fmt.printable(verdict.requested_model),
        verdict=verdict.verdict,
        badge=badge,
        colour=colour,
        route=fmt.printable(words.route(verdict, first)),
        difference=_shown(words.difference(verdict)),
        headline=fmt.printable(words.headline(verdict)),
        sessions=words.sessions(verdict),
        monthly=words.monthly(verdict),
        recommendation=recommendation,
        reason=fmt.printable(words.reason(verdict)),
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
