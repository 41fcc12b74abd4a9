"""``model_prices``: each requested model's prompt-cache discount, for the views that price tokens.

``switch_costs`` prices the cache reads a switch lost with the model's cache
discount: what a million input tokens cost uncached minus what they cost as
cache reads, at list prices (genai-prices, the price table the client uses).
SQL cannot ask genai-prices, so the analytics layer writes the discount into
this small table (one row per requested model, priced for the provider that
served most of its attempts) after each sync, for models it has not priced
yet. An unpriced model gets a NULL discount: its costs stay unknown, never 0.
"""

from __future__ import annotations

from typing import Final

import duckdb

from ledger.analytics.read import cache_rates
from ledger.analytics.read.figures import cache_read_discount

MTOK: Final = 1_000_000

DDL: Final = (
    "CREATE TABLE IF NOT EXISTS model_prices (requested_model VARCHAR NOT NULL, "
    "provider VARCHAR NOT NULL, discount_per_mtok DECIMAL(20, 10))"
)

# Models the rollup holds that have no price row yet, with their main provider.
_UNPRICED: Final = """
SELECT requested_model, arg_max(provider, rows) AS provider
FROM (
    SELECT requested_model, provider, sum(rows) AS rows
    FROM state_rollup
    WHERE is_attempt
    GROUP BY requested_model, provider
)
WHERE requested_model NOT IN (SELECT requested_model FROM model_prices)
GROUP BY requested_model
ORDER BY requested_model
"""


def ensure_table(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(DDL)
    cache_rates.ensure_table(con)  # the cache views' rates, kept the same way


def refresh(con: duckdb.DuckDBPyConnection) -> int:
    """Price the models that have none yet; how many were added."""
    rows = con.execute(_UNPRICED).fetchall()
    for model, provider in rows:
        discount = cache_read_discount(str(provider), str(model), MTOK)
        con.execute("INSERT INTO model_prices VALUES (?, ?, ?)", [model, provider, discount])
    return len(rows) + cache_rates.refresh(con)
