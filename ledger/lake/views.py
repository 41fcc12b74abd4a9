"""The view definitions a lake engine runs: every analytics view, in dependency order.

The lake engines (DuckDB over Parquet, Spark) compute the views from rows, with
the definitions in ``ledger/analytics/sql/*.sql``, or, over a lake whose derived
state is current (:mod:`ledger.lake.derive`), from its state tables with the
stored variants (``sql/stored/*.sql``): the same texts the analytics file
installs, with the thresholds of :class:`AnalyticsSettings` inlined
(:func:`inline_settings`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal
from typing import Final

from ledger.analytics.models import views as analytics_views
from ledger.analytics.read.figures import cache_read_discount
from ledger.analytics.read.prices import MTOK
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


def definitions(*, stored: bool = False) -> Iterator[tuple[str, str]]:
    """``(name, DuckDB SELECT)`` for every view, each after the views it reads.

    ``stored``: the variants that read the state tables (``sql/stored/``) where a
    view has one, for a lake with a current derived state (:mod:`ledger.lake.derive`).
    """
    body = analytics_views.stored_view_body if stored else analytics_views.view_body
    for name in analytics_views.VIEW_NAMES:
        yield name, body(name)


#: Attempts per (requested model, provider): portable SQL both lake engines run.
PROVIDER_ATTEMPTS: Final = (
    "SELECT requested_model, provider, count(*) AS attempts FROM token_usage "
    "WHERE attempt >= 1 GROUP BY requested_model, provider"
)


#: The (provider, requested model) pairs of the attempts, for ``cache_rates``.
PROVIDER_PAIRS: Final = (
    "SELECT DISTINCT provider, requested_model FROM token_usage WHERE attempt >= 1"
)


def model_prices(
    counts: Iterable[tuple[str, str, int]],
) -> list[tuple[str, str, Decimal | None]]:
    """The ``model_prices`` rows (see :mod:`ledger.analytics.read.prices`) for a lake: each
    requested model priced for the provider that served most of its attempts (ties:
    the first name), so both engines price the same provider."""
    main: dict[str, tuple[int, str]] = {}
    for model, provider, attempts in counts:
        best = main.get(model)
        if best is None or (attempts, _desc(provider)) > (best[0], _desc(best[1])):
            main[model] = (attempts, provider)
    return [
        (model, provider, cache_read_discount(provider, model, MTOK))
        for model, (_, provider) in sorted(main.items())
    ]


def _desc(name: str) -> tuple[int, ...]:
    """A key under which the alphabetically first name compares largest."""
    return tuple(-ord(c) for c in name)
