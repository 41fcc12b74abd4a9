"""Analytics over the ledger: a local DuckDB copy of ``token_usage`` and the views of contract §2.

The ledger (SQLite or PostgreSQL) is read through ADBC into Arrow and copied,
incrementally from the ledger's change log, into a DuckDB file that also holds the views, so
``duckdb FILE`` sees them too. :class:`Analytics` is the entry point; it
returns pandas DataFrames.
"""

from ledger.analytics.copy.local import AnalyticsBusy
from ledger.analytics.copy.sync import SyncResult
from ledger.analytics.copy.verify import Difference, Verification
from ledger.analytics.models.views import CONTRACT_VIEWS, VIEW_NAMES, Filters
from ledger.analytics.read.api import Analytics
from ledger.analytics.read.figures import LedgerOptions, Saving
from ledger.analytics.settings import ENV_ANALYTICS_PATH, AnalyticsSettings, analytics_path_for

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
