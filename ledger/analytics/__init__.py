"""Analytics over the ledger: a local DuckDB copy of ``token_usage`` and the views of contract §2.

The ledger (SQLite or PostgreSQL) is read through ADBC into Arrow and copied,
incrementally from the ledger's change log, into a DuckDB file that also holds the views, so
``duckdb FILE`` sees them too. :class:`Analytics` is the entry point; it
returns pandas DataFrames.
"""

from ledger.analytics.api import Analytics
from ledger.analytics.figures import LedgerOptions, Saving
from ledger.analytics.local import AnalyticsBusy
from ledger.analytics.settings import ENV_ANALYTICS_PATH, AnalyticsSettings, analytics_path_for
from ledger.analytics.sync import SyncResult
from ledger.analytics.verify import Difference, Verification
from ledger.analytics.views import CONTRACT_VIEWS, VIEW_NAMES, Filters

__all__ = [
    "CONTRACT_VIEWS",
    "ENV_ANALYTICS_PATH",
    "VIEW_NAMES",
    "Analytics",
    "AnalyticsBusy",
    "AnalyticsSettings",
    "Difference",
    "Filters",
    "LedgerOptions",
    "Saving",
    "SyncResult",
    "Verification",
    "analytics_path_for",
]
