"""``cache_rates``: each (provider, requested model)'s prompt-cache prices, for ``cache_economics``.

The cache views price writes, reads and uncached input per million tokens at
list prices (genai-prices, the table the client prices attempts with), which
SQL cannot ask; so, like :mod:`ledger.analytics.read.prices`, the analytics layer
writes the rates into this small table after each sync, for the pairs it has
not priced yet. A model without a price keeps NULL rates: its dollars stay
unknown, never 0.

Two rules fill what the price table leaves out. A model priced with a cache
write premium (Anthropic: 1.25x input for a 5-minute write) but no 1-hour rate
(OpenRouter's entries) gets Anthropic's published 1-hour rate, 2x input, which
OpenRouter passes through. A model without a write rate (OpenAI's automatic
caching) is priced with writes at the input rate: no premium, nothing to advise.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Final

import duckdb

from ledger.pricing import computed_cost
from ledger.providers import PROVIDERS
from ledger.providers.base import Usage

DDL: Final = (
    "CREATE TABLE IF NOT EXISTS cache_rates (provider VARCHAR NOT NULL, "
    "requested_model VARCHAR NOT NULL, input_mtok DECIMAL(20, 10), "
    "cache_read_mtok DECIMAL(20, 10), cache_write_mtok DECIMAL(20, 10), "
    "cache_write_1h_mtok DECIMAL(20, 10))"
)
#: The same table as a Spark schema (``ledger.lake.spark``).
SPARK_SCHEMA: Final = (
    "provider string, requested_model string, input_mtok decimal(20,10), "
    "cache_read_mtok decimal(20,10), cache_write_mtok decimal(20,10), "
    "cache_write_1h_mtok decimal(20,10)"
)
#: Tokens priced per rate, scaled to a million: under Anthropic's 200k-token tier,
#: whose long-context prices apply to whole prompts that long, not to a typical turn.
_SAMPLE: Final = 100_000
_SCALE: Final = Decimal(1_000_000 // _SAMPLE)

Rates = tuple[str, str, Decimal | None, Decimal | None, Decimal | None, Decimal | None]

# Pairs the rollup holds that have no rates yet.
_UNPRICED: Final = """
SELECT DISTINCT provider, requested_model FROM state_rollup AS r
WHERE is_attempt AND NOT EXISTS (
    SELECT 1 FROM cache_rates AS c
    WHERE c.provider = r.provider AND c.requested_model = r.requested_model)
"""


def rates(provider: str, model: str) -> Rates:
    """USD per million tokens: uncached input, cache read, 5-minute and 1-hour write."""
    cls = PROVIDERS.get(provider)
    prices_id = cls.prices_provider_id if cls is not None else None

    def per_mtok(usage: Usage) -> Decimal | None:
        cost = computed_cost(usage, model, provider=provider, provider_id=prices_id)
        return None if cost is None else cost * _SCALE

    n = _SAMPLE
    plain = per_mtok(Usage(input_tokens=n))
    read = per_mtok(Usage(input_tokens=n, cache_read_tokens=n))
    write = per_mtok(Usage(input_tokens=n, cache_write_tokens=n))
    long = per_mtok(Usage(input_tokens=n, cache_write_tokens=n, cache_write_1h_tokens=n))
    if plain is not None and write is not None and write > plain and long == write:
        long = 2 * plain  # no 1-hour rate in the table: Anthropic's, passed through
    return provider, model, plain, read, write, long


def rows(pairs: Iterable[tuple[str, str]]) -> list[Rates]:
    """The ``cache_rates`` rows for ``(provider, requested_model)`` pairs (the lake's)."""
    return [rates(provider, model) for provider, model in sorted(set(pairs))]


def ensure_table(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(DDL)


def refresh(con: duckdb.DuckDBPyConnection) -> int:
    """Price the pairs that have no rates yet; how many were added."""
    priced = rows((str(p), str(m)) for p, m in con.execute(_UNPRICED).fetchall())
    if priced:
        con.executemany("INSERT INTO cache_rates VALUES (?, ?, ?, ?, ?, ?)", priced)
    return len(priced)
