"""The sidebar filters every page shares: time range, agent, model, provider, key sent.

The frame (``app.py``) draws them on every run and stores the resulting
:class:`~ledger.analytics.Filters` in the session; pages read it with
:func:`current`. Relative ranges ("last hour") end now, or at the ledger's latest row when that is
older (so the range holds data), and start on a whole minute, so the filters,
and with them the cached results, stay the same for a minute.
"""

from __future__ import annotations

import datetime as dt
from typing import Final

import streamlit as st

from dashboards import fmt
from ledger.analytics import Filters, LedgerOptions

SESSION_KEY: Final = "ledger_filters"
CUSTOM: Final = "Custom dates"
RANGES: Final[dict[str, dt.timedelta | None]] = {
    "All time": None,
    "Last hour": dt.timedelta(hours=1),
    "Last 24 hours": dt.timedelta(days=1),
    "Last 7 days": dt.timedelta(days=7),
    "Last 30 days": dt.timedelta(days=30),
    CUSTOM: None,
}
KEY_CHOICES: Final[dict[str, bool | None]] = {"Any": None, "Sent": True, "Not sent": False}


def relative_start(now: dt.datetime, span: dt.timedelta) -> dt.datetime:
    """``now - span`` rounded down to the minute (stable cache keys within a minute)."""
    return (now - span).replace(second=0, microsecond=0)


def day_range(first: dt.date, last: dt.date) -> tuple[dt.datetime, dt.datetime]:
    """UTC ``[first 00:00, the day after last 00:00)``: whole days, both ends included."""
    start = dt.datetime.combine(first, dt.time(), dt.UTC)
    return start, dt.datetime.combine(last + dt.timedelta(days=1), dt.time(), dt.UTC)


def _time_range(options: LedgerOptions) -> tuple[dt.datetime | None, dt.datetime | None]:
    choice = st.selectbox("Time range", list(RANGES), key="filter_range")
    if choice == CUSTOM:
        today = dt.datetime.now(dt.UTC).date()
        first = options.first_at.date() if options.first_at else today
        last = options.last_at.date() if options.last_at else today
        picked = st.date_input("Dates (UTC)", value=(first, last), key="filter_dates")
        if isinstance(picked, tuple) and len(picked) == 2:
            return day_range(picked[0], picked[1])
        return None, None  # the second date is not picked yet
    span = RANGES[choice]
    if span is None:
        return None, None
    anchor = range_end(dt.datetime.now(dt.UTC), options.last_at)
    if anchor < dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1):
        st.caption(f"Ends at the ledger's latest row, {anchor:%Y-%m-%d %H:%M} UTC.")
    return relative_start(anchor, span), None


def range_end(now: dt.datetime, last_at: dt.datetime | None) -> dt.datetime:
    """Where "last hour" ends: now, or the ledger's latest row when it is older (a demo
    ledger or one that stopped recording), so the range holds data. Rounded up to the minute."""
    if last_at is None or last_at >= now:
        return now
    return last_at.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)


def sidebar(options: LedgerOptions) -> Filters:
    """Draw the filters in the sidebar; the chosen :class:`Filters` is also stored for pages."""
    with st.sidebar:
        st.header("Filters")
        start, end = _time_range(options)
        # ledger strings: shown escaped (fmt.printable), filtered by as stored
        actors = st.multiselect(
            "Agent", options.actors, key="filter_actors", format_func=fmt.printable
        )
        models = st.multiselect(
            "Model (requested)", options.models, key="filter_models", format_func=fmt.printable
        )
        providers = st.multiselect(
            "Provider", options.providers, key="filter_providers", format_func=fmt.printable
        )
        key = st.radio("Session key sent", list(KEY_CHOICES), horizontal=True, key="filter_key")
    chosen = Filters(
        start=start,
        end=end,
        actors=tuple(actors) or None,
        models=tuple(models) or None,
        providers=tuple(providers) or None,
        key_sent=KEY_CHOICES[key or "Any"],
    )
    st.session_state[SESSION_KEY] = chosen
    return chosen


def current() -> Filters:
    """The filters the sidebar holds (no filter before the frame has drawn it)."""
    chosen = st.session_state.get(SESSION_KEY)
    return chosen if isinstance(chosen, Filters) else Filters()
