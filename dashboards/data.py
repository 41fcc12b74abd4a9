"""Where the pages get their numbers: one cached Analytics, cached results.

* :func:`analytics_for` is a ``st.cache_resource``: one
  :class:`~ledger.analytics.Analytics` (one DuckDB connection, a cursor per
  query) for the server process; opening it runs the ledger check every
  command runs (:func:`ledger.store.migrate.check_ledger`).
* :func:`data_version` syncs new ledger rows at most every ``REFRESH_S``
  seconds; its value (the last copied id and row count) is part of every
  result's cache key, so results recompute exactly when the ledger grew.
* :func:`load` runs one named figure (a view or an ``Analytics`` figure method)
  for the sidebar's :class:`Filters`, through ``st.cache_data``.

Pages never touch SQL or the connection: they call :func:`load`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import streamlit as st

from ledger.analytics import Analytics, Filters, LedgerOptions
from ledger.analytics.models.views import VIEW_NAMES
from ledger.analytics.read.experiment import Effect
from ledger.policies import Policy, active_policies
from ledger.store.engine import database_url, display_url, make_engine

#: Seconds between two looks for new ledger rows.
REFRESH_S: Final = 30
#: Seconds a computed result stays cached (new rows invalidate it sooner).
RESULT_TTL_S: Final = 3600


def ledger_url() -> str:
    """The ledger's URL as a cache key (``LEDGER_DATABASE_URL`` or the default file)."""
    return database_url().render_as_string(hide_password=False)


def _close(analytics: Analytics) -> None:
    analytics.close()


@st.cache_resource(show_spinner="Opening the ledger…", on_release=_close)
def analytics_for(url: str) -> Analytics:
    """The process's Analytics over ``url``; raises (and caches nothing) when the ledger is unfit:
    missing, unmigrated or unreachable (each a :class:`~ledger.errors.DatabaseError`).

    ``allow_memory``: when another process holds the analytics file (a second
    dashboard, a long ``ledger export``) this one still works, on a private
    in-memory copy.
    """
    return Analytics(url, sync=False, allow_memory=True)


@st.cache_data(ttl=REFRESH_S, show_spinner="Syncing new ledger rows…")
def data_version(url: str) -> tuple[int, int]:
    """Sync the analytics copy; ``(last id, rows)`` identifies what the results are over."""
    result = analytics_for(url).refresh()
    return result.last_id, result.rows_total


def _view(name: str) -> Callable[[Analytics, Filters], Any]:
    def read(analytics: Analytics, filters: Filters) -> Any:
        return analytics.view(name, filters)

    return read


def _method(name: str) -> Callable[..., Any]:
    def read(analytics: Analytics, filters: Filters, *args: Any) -> Any:
        return getattr(analytics, name)(filters, *args)

    return read


#: Every figure a page may ask for, by name (names make stable cache keys).
LOADERS: Final[dict[str, Callable[..., Any]]] = {
    **{
        name: _view(name)
        for name in (
            "agent_stickiness",
            "session_stickiness",
            "cache_hits",
            "upstream_scorecard",
            "cost_attribution",
            "provider_order_verdict",
            "switch_costs",
            "cache_economics",
            "cache_ttl_advice",
        )
    },
    **{
        name: _method(name)
        for name in (
            "cache_hits_by_agent",
            "overview_totals",
            "timeline",
            "spend_over_time",
            "prompt_cache_saving",
            "response_cache_saving",
            "cost_by_agent",
            "fallback_cost",
            "failed_attempts",
            "estimated_vs_billed",
            "cache_decay_by_key",
            "top_sessions",
            "session_attempts",
            "session_moves",
        )
    },
}


@st.cache_data(ttl=RESULT_TTL_S, max_entries=512, show_spinner=False)
def _cached(
    url: str, version: tuple[int, int], name: str, filters: Filters, args: tuple[Any, ...]
) -> Any:
    return LOADERS[name](analytics_for(url), filters, *args)


@st.cache_data(ttl=REFRESH_S, show_spinner=False)
def _experiments(url: str, version: tuple[int, int]) -> list[tuple[Policy, Effect]]:
    engine = make_engine(url)
    try:
        running = active_policies(engine)
    finally:
        engine.dispose()
    analytics = analytics_for(url)
    return [(p, analytics.experiment(p.id)) for p in running]


def experiments() -> list[tuple[Policy, Effect]]:
    """Each active routing policy and its effect so far (policies are read every
    ``REFRESH_S``: one applied or stopped elsewhere shows within that)."""
    url = ledger_url()
    return _experiments(url, data_version(url))


def has_view(name: str) -> bool:
    """Whether this installation's analytics has view ``name`` (views arrive over releases)."""
    return name in VIEW_NAMES


def load(name: str, filters: Filters, *args: Any) -> Any:
    """Figure ``name`` over the rows ``filters`` selects, cached until the ledger grows."""
    url = ledger_url()
    return _cached(url, data_version(url), name, filters, args)


@st.cache_data(ttl=RESULT_TTL_S, show_spinner=False)
def _options(url: str, version: tuple[int, int]) -> LedgerOptions:
    return analytics_for(url).ledger_options()


def options() -> LedgerOptions:
    """What the whole ledger holds (for the filters); raises when the ledger is unfit."""
    url = ledger_url()
    return _options(url, data_version(url))


def where() -> str:
    """The ledger's URL for people (password hidden)."""
    return display_url(database_url())
