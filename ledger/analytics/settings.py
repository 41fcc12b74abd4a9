"""Where the local analytics file lives, and the knobs the views read.

The knobs are stored *in* the DuckDB file (table ``ledger_settings``) and the
views read them through the ``ledger_setting(name)`` macro, so a query run by
``duckdb FILE`` uses the same idle window and verdict thresholds as
``ledger report``. Change one with :class:`AnalyticsSettings` from Python
(``Analytics.configure``), or in ``duckdb FILE``: ``UPDATE ledger_settings SET
value = 300 WHERE name = 'idle_window_s'`` (``ledger sql`` only reads).

Where the file lives is the ``[analytics]`` section's ``path`` (read by
:mod:`ledger.config`), ``LEDGER_ANALYTICS_PATH`` over it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sqlalchemy.engine import URL

from ledger import config as cfg
from ledger.errors import SettingError
from ledger.store.engine import sqlite_path

ENV_ANALYTICS_PATH: Final = "LEDGER_ANALYTICS_PATH"
#: Suffix of the file beside a SQLite ledger: ``ledger.db`` -> ``ledger.db.analytics.duckdb``.
SQLITE_SIDECAR_SUFFIX: Final = ".analytics.duckdb"


@dataclass(frozen=True, slots=True, kw_only=True)
class AnalyticsSettings:
    """Every threshold the views use; the defaults are the documented ones.

    ``idle_window_s``: a gap longer than this between two served attempts of a
    session releases the pin (OpenRouter's sticky pin expires after 10 min).

    The ``provider_order_verdict`` knobs (see ``sql/provider_order_verdict.sql``):

    ``min_samples``: attempts an upstream needs (and served attempts with a
    latency) before it is judged; below it the verdict is ``insufficient_data``.
    ``confidence_z``: the normal quantile of the intervals (1.96 = 95 % two-sided)
    used by the Wilson error-rate intervals and the order-statistic p95 intervals
    (both computed with the session design effect of ``sql/upstream_clusters.sql``).
    ``error_rate_margin``: absolute error-rate excess (0.02 = 2 points) the pinned
    upstream's lower bound must show over the best alternative's upper bound.
    ``latency_margin``: relative p95 excess (0.25 = 25 %) between the same bounds.
    ``cost_margin``: relative excess of the pinned upstream's effective cost per
    million input tokens over the best alternative's.
    ``max_cost_increase``: how much dearer (relative) the affected traffic may
    become under the recommendation (prices, cache hits gained or lost, retries
    avoided) and still be worth it for errors or latency; beyond it the verdict
    is ``not_warranted`` and the reason states the trade-off.
    ``order_share_min``: share of a model's pinned sessions (0.5 = half) held by
    the upstreams found worse from which the recommendation is ``provider.order``
    (every session pinned to the best upstream) rather than ``provider.ignore``
    (only the worse upstreams' sessions move, sticky routing kept).
    ``cache_read_price_ratio``: price of a cache-read input token relative to an
    uncached one, used to project the first choice's cost under ``provider.order``
    at its projected hit rate (0.1 is Anthropic's ratio; a low ratio values the
    cache highly, so it is the cautious default).
    """

    idle_window_s: float = 600.0
    min_samples: float = 100.0
    confidence_z: float = 1.96
    error_rate_margin: float = 0.02
    latency_margin: float = 0.25
    cost_margin: float = 0.10
    max_cost_increase: float = 0.10
    cache_read_price_ratio: float = 0.1
    order_share_min: float = 0.5

    def __post_init__(self) -> None:
        for name, value in self.as_dict().items():
            if not value >= 0:  # also rejects NaN
                raise ValueError(f"analytics setting {name} must be >= 0, got {value!r}")
        for name in ("cache_read_price_ratio", "order_share_min"):
            if getattr(self, name) > 1:
                raise ValueError(f"{name} must be within [0, 1]")

    def as_dict(self) -> dict[str, float]:
        return {f.name: float(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_mapping(cls, values: dict[str, float]) -> AnalyticsSettings:
        """Settings from stored name/value pairs; unknown names are ignored."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: float(v) for k, v in values.items() if k in known})


@dataclass(frozen=True, slots=True)
class AnalyticsLocation:
    """Where the analytics DuckDB file is kept, when not in its default place."""

    path: Path | None = cfg.setting(
        default=None,
        doc="the analytics DuckDB file (default: beside a SQLite ledger, else in ~/.cache/ledger/)",
        env=ENV_ANALYTICS_PATH,
        default_text="beside a SQLite ledger, else ~/.cache/ledger/",
        example='"/var/lib/ledger/analytics.duckdb"',
    )

    @classmethod
    def load(cls, path: Path | None = None) -> AnalyticsLocation:
        """The ``[analytics]`` section of ``path`` (else the one found), the variable over it."""
        found = cfg.read_table(SECTION, path)
        return cls(**cfg.read_settings(SECTION, found, {"path": _path}))


def _path(where: cfg.Where, key: str, value: object) -> Path:
    return Path(cfg.text(where, key, value))


SECTION: Final = cfg.Section(
    "analytics",
    AnalyticsLocation,
    SettingError,
    summary="The local DuckDB copy the views are read from.",
)


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ledger"


def analytics_path_for(url: URL) -> Path:
    """The default DuckDB file for a ledger.

    ``LEDGER_ANALYTICS_PATH`` (else the ``[analytics]`` section's ``path``) wins; a
    SQLite ledger keeps it beside its file so
    both travel together, unless its directory is one we may not write (a
    read-only share); a server ledger, and such a SQLite ledger, get one in the
    user's cache directory, named by a hash of the URL without the password (so
    changing a password keeps the file, and the file name leaks nothing).
    """
    if (named := AnalyticsLocation.load().path) is not None:
        return named
    path = sqlite_path(url)
    if path is not None and (not path.parent.exists() or os.access(path.parent, os.W_OK)):
        return path.with_name(path.name + SQLITE_SIDECAR_SUFFIX)
    if path is not None:
        url = url.set(database=str(path.resolve()))
    key = url.render_as_string(hide_password=True).encode()
    return _cache_dir() / f"analytics-{hashlib.sha256(key).hexdigest()[:16]}.duckdb"
