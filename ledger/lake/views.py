"""The view definitions a lake engine runs: every analytics view, in dependency order.

The lake engines (DuckDB over Parquet, Spark) compute the views from rows, with
the definitions in ``ledger/analytics/views/*.sql`` — the same text the
analytics file installs — and the thresholds of :class:`AnalyticsSettings`
inlined (:func:`inline_settings`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Final

from ledger.analytics import views as analytics_views
from ledger.analytics.settings import AnalyticsSettings

_SETTING: Final = re.compile(r"ledger_setting\(\s*'(\w+)'\s*\)")


class UnknownSetting(KeyError):
    """A view reads ``ledger_setting(name)`` for a name the settings do not hold."""


def inline_settings(sql: str, settings: Mapping[str, float]) -> str:
    """Replace every ``ledger_setting('name')`` with ``CAST(value AS DOUBLE)``."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in settings:
            raise UnknownSetting(f"the views read setting {name!r}, which is not defined")
        return f"CAST({float(settings[name])!r} AS DOUBLE)"

    return _SETTING.sub(value, sql)


def settings_values(settings: AnalyticsSettings | None) -> dict[str, float]:
    return {k: float(v) for k, v in (settings or AnalyticsSettings()).as_dict().items()}


def definitions() -> Iterator[tuple[str, str]]:
    """``(name, DuckDB SELECT)`` for every view, each after the views it reads."""
    for name in analytics_views.VIEW_NAMES:
        yield name, analytics_views.view_body(name)
