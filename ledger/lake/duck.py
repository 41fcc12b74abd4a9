"""The views over a Parquet lake in DuckDB: the lake's committed files, every view.

For an analyst with the lake and no ledger: ``connect("s3://bucket/ledger")``
returns an in-memory DuckDB connection where ``token_usage`` is the lake's
committed rows (on a local disk read by DuckDB's own Parquet reader; elsewhere
through ``pyarrow.dataset``, so any ``pyarrow.fs`` target works without DuckDB
extensions) and every analytics view is defined over it.

When the lake has a derived state that reflects exactly its committed rows
(``ledger lake derive``, :mod:`ledger.lake.derive`), the state tables are
registered too and the views are the stored variants that read them, as in
the local analytics file: seconds at 100M rows instead of minutes. A state
the lake has outgrown is warned about (:class:`ledger.lake.derive.StaleStateWarning`)
and the views are computed from the rows.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow.dataset as pads

from ledger.analytics.models import verdict_sentences
from ledger.analytics.read import cache_rates, prices
from ledger.analytics.settings import AnalyticsSettings
from ledger.lake import derive
from ledger.lake import manifest as mf
from ledger.lake.export import open_target
from ledger.lake.views import (
    PROVIDER_ATTEMPTS,
    PROVIDER_PAIRS,
    definitions,
    inline_settings,
    model_prices,
    settings_values,
)


def dataset(target: str | Path) -> pads.Dataset:
    """The lake's committed files as one Arrow dataset (empty for a new lake)."""
    filesystem, root = open_target(target)
    return derive.lake_dataset(filesystem, root, mf.read(filesystem, root))


def connect(
    target: str | Path, settings: AnalyticsSettings | None = None
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with ``token_usage`` and every view over the lake
    (over its derived state when that is current). A path ``ledger export`` never wrote
    is :class:`~ledger.errors.LakeEmpty`, a file :class:`~ledger.errors.LakeTargetError`."""
    filesystem, root = open_target(target)
    manifest = derive.lake_manifest(filesystem, root, target)
    state = derive.current(filesystem, root, manifest, target=str(target))
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    derive.register_rows(con, filesystem, root, manifest)
    if state is not None:
        derive.register_state(con, filesystem, root, state)
    prices.ensure_table(con)
    rows = model_prices(con.execute(PROVIDER_ATTEMPTS).fetchall())
    if rows:
        con.executemany("INSERT INTO model_prices VALUES (?, ?, ?)", rows)
    if rates := cache_rates.rows(con.execute(PROVIDER_PAIRS).fetchall()):
        con.executemany("INSERT INTO cache_rates VALUES (?, ?, ?, ?, ?, ?)", rates)
    values = settings_values(settings)
    for name, body in definitions(stored=state is not None):
        if name == "provider_order_verdict":  # its sentences, written by Python
            verdict_sentences.register_duckdb(con)
        con.execute(f"CREATE VIEW {name} AS {inline_settings(body, values)}")
    return con
