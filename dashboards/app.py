"""The dashboard's entry point: router and frame (``ledger dashboard`` runs it).

It opens the ledger named by ``LEDGER_DATABASE_URL`` (else ``./ledger.db``),
says what to do when the ledger is missing, old, unreachable or empty, draws
the shared sidebar filters, then runs the chosen page from ``screens/``. Pages
get every number through :mod:`dashboards.data`; none of them writes SQL.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path

import streamlit as st

HERE = Path(__file__).resolve().parent


def _import_as_dashboards() -> None:
    """Make this directory importable as ``dashboards`` wherever it was installed.

    In the repository it already is; inside a wheel it may live under another
    name (``ledger/_dashboards``), and the pages import ``dashboards.*``.
    """
    if "dashboards" in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(
        "dashboards", HERE / "__init__.py", submodule_search_locations=[str(HERE)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["dashboards"] = module
    spec.loader.exec_module(module)


_import_as_dashboards()

from dashboards import data, filters, notices  # noqa: E402
from ledger.errors import LedgerError  # noqa: E402

log = logging.getLogger("ledger.dashboard")

# The page scripts live in screens/, not pages/: Streamlit treats a pages/ folder beside
# the main script as a legacy (v1) multipage app. While PagesManager.uses_pages_directory
# is set (from the folder's existence, until the first st.navigation() call of the process;
# AppTest resets it before every run), the script runner runs its own navigation over
# app.py and pages/*.py instead of this script, and a page whose URL path is its file
# name is then run on its own, without this frame: no sidebar filters, stale Filters.
# (Not views/ either: in this house "views" are the analytics SQL views.)
PAGES = [
    st.Page("screens/overview.py", title="Overview", icon=":material/dashboard:", default=True),
    st.Page("screens/stickiness.py", title="Stickiness", icon=":material/push_pin:"),
    st.Page("screens/cache.py", title="Cache", icon=":material/cached:"),
    st.Page("screens/cost.py", title="Cost", icon=":material/payments:"),
    st.Page("screens/upstreams.py", title="Upstreams & verdict", icon=":material/gavel:"),
    st.Page("screens/budgets.py", title="Budgets", icon=":material/savings:"),
]


def main() -> None:
    st.set_page_config(page_title="ledger", page_icon=":material/receipt_long:", layout="wide")
    page = st.navigation(PAGES)
    try:
        options = data.options()
    except LedgerError as exc:
        notices.show_problem(exc)
        return
    if options.rows == 0:
        notices.show_empty(data.where())
        return
    filters.sidebar(options)
    st.sidebar.caption(f"Ledger: `{data.where()}` · {options.rows:,} rows")
    try:
        page.run()
    except LedgerError as exc:
        notices.show_problem(exc)
    except Exception as exc:  # a bug of ours: a message on the page, the traceback in the log
        log.exception("dashboard page %s failed", page.title)
        notices.show_unexpected(exc)


main()
