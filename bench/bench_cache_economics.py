"""Benchmark ``cache_economics`` and ``cache_ttl_advice`` at scale, beside a baseline.

    PYTHONPATH=. .venv/bin/python bench/bench_cache_economics.py --rows 10000000 --rounds 3

Both views are plain (row) views: each read computes them from ``token_usage``
(a window over every session's served attempts, then aggregates). The rows are
generated inside DuckDB, straight into the analytics file's ``token_usage``
(the schema ``ledger.analytics.copy.local`` creates), not synced from a ledger: the
views' cost does not depend on how the rows arrived, and a 10M-row SQLite
ledger plus its first sync would take most of the run. Shape: sessions of 8
turns a minute or several apart, 6 agents, 3 models (Anthropic direct with
5-minute and 1-hour writes, OpenRouter's Sonnet, OpenAI), 40 % of the rows
writing the cache, a fifth of those with ``usage_details`` naming 1-hour writes.

Baseline, in the same run: ``session_stickiness`` computed from the rows (its
definition, ``sql/session_stickiness.sql`` over ``transitions``): the same kind of
work, a window over every session's served attempts, then a group by. Each view is
read whole (``fetchall``); the rounds interleave the three, and each figure is
the median of the rounds. Target (issue 42): <= 1 s at 10M rows.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Final

import duckdb

from ledger.analytics.copy import local
from ledger.analytics.models import views
from ledger.analytics.read import cache_rates
from ledger.analytics.settings import AnalyticsSettings

_ROWS: Final = """
INSERT INTO token_usage (id, event_id, call_id, attempt, started_at, session_id, actor_id,
    requested_provider, requested_model, provider, upstream, status, input_tokens,
    output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, response_cache_hit,
    streamed, paused, usage_reported, usage_details)
SELECT
    i + 1, CAST(i AS VARCHAR), CAST(i AS VARCHAR), 1,
    TIMESTAMPTZ '2026-10-01 00:00:00+00' + to_seconds(
        (i // 8) * 0.26 + (i % 8) * CASE WHEN (i // 8) % 3 = 0 THEN 420 ELSE 30 END),
    's' || CAST(i // 8 AS VARCHAR),
    'agent' || CAST((i // 8) % 6 AS VARCHAR),
    ['anthropic', 'openrouter', 'openai'][(i // 8) % 3 + 1],
    ['claude-sonnet-4-5-20250929', 'anthropic/claude-sonnet-4.5', 'gpt-4o-mini'][(i // 8) % 3 + 1],
    ['anthropic', 'openrouter', 'openai'][(i // 8) % 3 + 1],
    CASE WHEN (i // 8) % 3 = 1 THEN ['Anthropic', 'Google Vertex'][(i // 8) % 2 + 1] END,
    'ok',
    12000 + (i % 8) * 1000, 300,
    CASE WHEN i % 8 = 0 OR (i // 8) % 3 = 0 THEN 0 ELSE 10000 + (i % 8 - 1) * 1000 END,
    CASE WHEN (i // 8) % 3 = 2 THEN 0 WHEN i % 8 = 0 OR (i // 8) % 3 = 0 THEN 10000 + (i % 8) * 1000
        ELSE 1000 END,
    0, false, false, false, true,
    CASE WHEN (i // 8) % 15 = 0 THEN '{"cache_write": {"ttl_1h": 1000}}' END
FROM range(?) AS t(i)
"""


def build(con: duckdb.DuckDBPyConnection, rows: int) -> None:
    local.ensure_schema(con)
    local.write_settings(con, AnalyticsSettings(), overwrite=True)
    con.execute(_ROWS, [rows])
    pairs = con.execute("SELECT DISTINCT provider, requested_model FROM token_usage").fetchall()
    con.executemany(
        "INSERT INTO cache_rates VALUES (?, ?, ?, ?, ?, ?)",
        cache_rates.rows((str(p), str(m)) for p, m in pairs),
    )
    for name in ("ledger_span", "transitions", "session_stickiness", "cache_economics",
                 "cache_ttl_advice"):  # fmt: skip
        con.execute(f"CREATE OR REPLACE VIEW {name} AS {views.view_body(name)}")


def timed(con: duckdb.DuckDBPyConnection, name: str) -> tuple[float, int]:
    started = time.perf_counter()
    rows = len(con.execute(f"SELECT * FROM {name}").fetchall())
    return time.perf_counter() - started, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    started = time.perf_counter()
    build(con, args.rows)
    print(f"{args.rows:,} rows generated in {time.perf_counter() - started:.1f} s")
    names = ("session_stickiness", "cache_economics", "cache_ttl_advice")
    times: dict[str, list[float]] = {n: [] for n in names}
    counts: dict[str, int] = {}
    for _ in range(args.rounds):
        for name in names:
            seconds, counts[name] = timed(con, name)
            times[name].append(seconds)
    base = statistics.median(times["session_stickiness"])
    for name in names:
        median = statistics.median(times[name])
        print(f"{name:<20} {median:6.2f} s median of {args.rounds} ({counts[name]:,} rows), "
              f"{median / base:4.2f}x the baseline  target <= 1 s")  # fmt: skip


if __name__ == "__main__":
    main()
