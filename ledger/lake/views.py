"""The view definitions a lake engine runs: every analytics view, in dependency order.

The lake engines (DuckDB over Parquet, Spark) compute the views from rows, with
the definitions in ``ledger/analytics/views/*.sql`` — the same text the
analytics file installs — and the thresholds of :class:`AnalyticsSettings`
inlined (:func:`ledger.lake.spark_sql.inline_settings`).
"""

from __future__ import annotations

from collections.abc import Iterator

from ledger.analytics import views as analytics_views
from ledger.analytics.settings import AnalyticsSettings


def settings_values(settings: AnalyticsSettings | None) -> dict[str, float]:
    return {k: float(v) for k, v in (settings or AnalyticsSettings()).as_dict().items()}


def definitions() -> Iterator[tuple[str, str]]:
    """``(name, DuckDB SELECT)`` for every view, each after the views it reads."""
    for name in analytics_views.VIEW_NAMES:
        yield name, analytics_views.view_body(name)
