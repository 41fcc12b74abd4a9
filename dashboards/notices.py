"""What the dashboard says instead of numbers: an empty, missing, old or unreachable ledger.

Each message names the command that fixes it. None shows a traceback: the
frame catches our errors and renders them here.
"""

from __future__ import annotations

import streamlit as st

from ledger.errors import (
    ConfigurationError,
    DatabaseUnreachable,
    LedgerError,
    LedgerMissing,
    SchemaOutOfDate,
)
from ledger.store.engine import ENV_URL

DEMO_COMMAND = "ledger demo"
UPGRADE_COMMAND = "ledger db upgrade"


def show_empty(where: str) -> None:
    st.title("The ledger is empty")
    st.info(
        f"The ledger at `{where}` holds no calls yet. Fill it with a realistic simulated "
        "multi-agent workload, then reload this page:"
    )
    st.code(DEMO_COMMAND, language="bash")
    st.caption(
        "Or record your own calls through `ledger.Client` (or the metering httpx transport)."
    )


def show_no_match() -> None:
    st.warning(
        "No ledger rows match these filters. Widen the time range or clear a filter in the sidebar."
    )


def show_problem(exc: LedgerError) -> None:
    """The message for one of our errors, with the command that fixes it."""
    if isinstance(exc, LedgerMissing):
        st.title("No ledger database yet")
        st.warning(
            f"There is no ledger database at `{exc.path}`. Create it with "
            f"`{UPGRADE_COMMAND}`, or create and fill it with a simulated workload:"
        )
        st.code(DEMO_COMMAND, language="bash")
    elif isinstance(exc, SchemaOutOfDate):
        st.title("The ledger database is out of date")
        current = exc.current or "none (no ledger schema yet)"
        st.warning(
            f"{exc}.\n\nIts schema revision is {current}; this dashboard needs {exc.head}. "
            "Migrate it with:"
        )
        st.code(UPGRADE_COMMAND, language="bash")
    elif isinstance(exc, DatabaseUnreachable):
        st.title("Cannot reach the ledger database")
        st.error(
            f"The ledger database at `{exc.url}` does not answer. Check that the server is "
            f"running and that `{ENV_URL}` names it correctly.\n\nDetails: {exc}"
        )
    elif isinstance(exc, ConfigurationError):
        st.title("The ledger is not configured correctly")
        st.error(f"{exc}\n\nSet `{ENV_URL}` to a `sqlite:///…` or `postgresql://…` URL.")
    else:
        st.title("The ledger cannot be read")
        st.error(str(exc))


def show_unexpected(exc: Exception) -> None:
    """A bug of ours: say so plainly (the traceback goes to the server's log)."""
    st.error(
        f"This page hit an unexpected error ({type(exc).__name__}: {exc}). "
        "The details are in the dashboard's log."
    )
