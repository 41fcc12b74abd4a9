"""Analytics benchmark: sync and view times at scale, next to pandas in the same run.

    .venv/bin/python bench/bench_analytics.py --rows 1000000
    .venv/bin/python bench/bench_analytics.py --rows 10000000 --workdir /tmp/ledger-bench

Builds a synthetic SQLite ledger (migrated schema; its secondary indexes are
rebuilt after the bulk load, which is faster than maintaining them), then
measures: the initial sync into DuckDB, an incremental sync of 10k new rows, a
sync with nothing new, each view fully materialised (fetched as Arrow), and
the same stickiness and cache-hit computations in pandas over the same rows.
Targets (issue 6, 2-core machine): each view <= 3 s at 10M rows, incremental
10k-row sync <= 0.5 s, each view >= 10x faster than pandas, peak RSS < 4 GiB.
Peak RSS is measured before the pandas part (which needs far more memory).
"""

from __future__ import annotations

import argparse
import resource
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ledger.analytics import VIEW_NAMES, Analytics
from ledger.schema import EVENT_COLUMNS
from ledger.store.engine import make_engine
from ledger.store.migrate import upgrade

T0 = 1_740_000_000  # unix seconds
UPSTREAMS = np.array(["Together", "Fireworks", "DeepInfra", "Lambda", "Novita", "Groq"])
MODELS = np.array(["m-llama", "m-qwen", "m-deepseek", "m-mistral", "m-gemma"])
CALLS_PER_SESSION = 20


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 / 1024


def synthetic_rows(start: int, n: int, seed: int) -> Iterator[tuple[Any, ...]]:
    """``n`` rows with ids from ``start``: sessions of 20 calls, sticky when keyed."""
    rng = np.random.default_rng(seed)
    idx = np.arange(start, start + n)
    session = idx // CALLS_PER_SESSION
    keyed = session % 2 == 0
    pinned = rng.integers(0, len(UPSTREAMS), n)[session - session.min()]
    moved = rng.random(n) < np.where(keyed, 0.03, 0.6)
    upstream = UPSTREAMS[np.where(moved, rng.integers(0, len(UPSTREAMS), n), pinned)]
    # calls ~30 s apart, with a long pause now and then (idle releases)
    started = T0 + session * 900 + (idx % CALLS_PER_SESSION) * 30 + rng.random(n)
    started += (rng.random(n) < 0.02) * 700
    error = rng.random(n) < 0.05
    cache_hit_row = ~error & (rng.random(n) < 0.02)
    input_tokens = rng.integers(500, 8000, n)
    reads = (input_tokens * rng.random(n) * np.where(keyed, 0.9, 0.3)).astype(int)
    latency = rng.gamma(2.0, 400.0, n)
    cost = np.round((input_tokens - reads) * 1e-6 + reads * 1e-7, 10)
    stamps = pd.to_datetime(started, unit="s").strftime("%Y-%m-%d %H:%M:%S.%f")
    for i in range(n):
        row_id = int(idx[i])
        err, rch = bool(error[i]), bool(cache_hit_row[i])
        s = int(session[i])
        yield (
            f"{row_id:08x}-0000-4000-8000-{row_id:012x}",
            f"{row_id:08x}-0000-4000-9000-{row_id:012x}",
            0 if rch else 1,
            stamps[i],
            None if rch else float(latency[i]),
            None,
            f"sess-{s}",
            f"agent-{s % 20}",
            f"app:{s}" if keyed[i] else None,
            "openrouter",
            str(MODELS[s % 5]),
            "openrouter",
            str(MODELS[s % 5]),
            None if rch else str(upstream[i]),
            None,
            None,
            None,
            "error" if err else "ok",
            "server_error" if err else None,
            502 if err else None,
            0 if err or rch else int(input_tokens[i]),
            0 if err or rch else 200,
            0 if err or rch else int(reads[i]),
            0,
            0,
            None if err or rch else float(cost[i]),
            None if err or rch else "computed",
            1 if rch else 0,
            0,
            0,
            None,
            None,
        )


def build_ledger(path: Path, rows: int) -> str:
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    con = sqlite3.connect(path)
    indexes = con.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'token_usage' "
        "AND sql IS NOT NULL"
    ).fetchall()
    for (sql,) in indexes:
        con.execute("DROP INDEX " + sql.split()[2 if "UNIQUE" not in sql else 3])
    append_rows(con, 1, rows)
    for (sql,) in indexes:
        con.execute(sql)
    con.commit()
    con.close()
    return url


def append_rows(con: sqlite3.Connection, start: int, n: int) -> None:
    sql = (
        f"INSERT INTO token_usage (id, {', '.join(EVENT_COLUMNS)}) "
        f"VALUES (?, {', '.join('?' * len(EVENT_COLUMNS))})"
    )
    chunk = 500_000
    for offset in range(0, n, chunk):
        size = min(chunk, n - offset)
        first = start + offset
        con.executemany(
            sql, ((first + i, *r) for i, r in enumerate(synthetic_rows(first, size, first)))
        )
    con.commit()


def timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def pandas_stickiness(df: pd.DataFrame, idle_s: float) -> pd.DataFrame:
    served = df[(df.status == "ok") & ~df.response_cache_hit & df.session_id.notna()].copy()
    served["ident"] = served.upstream.fillna(served.provider)
    served = served.sort_values(
        ["session_id", "actor_id", "requested_model", "started_at", "attempt", "id"]
    )
    keys = ["session_id", "actor_id", "requested_model"]
    same = (served[keys] == served[keys].shift()).all(axis=1)
    gap = served.started_at.diff().dt.total_seconds()
    changed = served.ident != served.ident.shift()
    served["trans"] = same
    served["window"] = same & (gap <= idle_s)
    served["switch"] = served.window & changed
    served["idle"] = same & (gap > idle_s) & changed
    served["key"] = served.session_key.notna()
    per = served.groupby(keys).agg(
        calls=("id", "size"),
        window=("window", "sum"),
        switches=("switch", "sum"),
        idle=("idle", "sum"),
        key_sent=("key", "any"),
        upstreams=("ident", "nunique"),
    )
    per["stickiness"] = 1 - per.switches / per.window.where(per.window > 0)
    return per


def pandas_cache_hits(df: pd.DataFrame) -> pd.DataFrame:
    rows = df[(df.status == "ok") | df.response_cache_hit].copy()
    rows["ident"] = rows.upstream.fillna(rows.provider)
    rows["key"] = rows.session_key.notna()
    rows["served"] = (rows.status == "ok") & ~rows.response_cache_hit
    rows["served_in"] = rows.input_tokens.where(rows.served, 0)
    rows["served_read"] = rows.cache_read_tokens.where(rows.served, 0)
    rows["hit"] = rows.served & (rows.cache_read_tokens > 0)
    g = rows.groupby(["actor_id", "requested_model", "ident", "key"]).agg(
        calls=("served", "sum"),
        input_tokens=("served_in", "sum"),
        cache_read_tokens=("served_read", "sum"),
        hits=("hit", "sum"),
        response_cache_hits=("response_cache_hit", "sum"),
    )
    g["token_hit_rate"] = g.cache_read_tokens / g.input_tokens
    g["call_hit_rate"] = g.hits / g.calls
    return g


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ledger-bench"))
    parser.add_argument("--skip-pandas", action="store_true")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    ledger = args.workdir / f"ledger-{args.rows}.db"
    duck = args.workdir / f"analytics-{args.rows}.duckdb"
    duck.unlink(missing_ok=True)
    if not ledger.exists():
        t, url = timed(lambda: build_ledger(ledger, args.rows))
        print(f"generated {args.rows:,} rows in {t:.1f} s")
    url = f"sqlite:///{ledger}"

    t_initial, analytics = timed(lambda: Analytics(url, path=duck))
    print(f"initial sync        {t_initial:8.2f} s  ({args.rows / t_initial:,.0f} rows/s)")
    con = sqlite3.connect(ledger)
    (top,) = con.execute("SELECT max(id) FROM token_usage").fetchone()
    append_rows(con, top + 1, 10_000)
    t_inc, res = timed(analytics.refresh)
    print(f"incremental 10k     {t_inc:8.3f} s  (target <= 0.5 s; added {res.rows_added})")
    t_noop, _ = timed(analytics.refresh)
    print(f"nothing new         {t_noop:8.3f} s")
    # the appended rows leave the ledger as the bench found it next time
    con.execute("DELETE FROM token_usage WHERE id > ?", (top,))
    con.commit()
    con.close()

    view_times = {}
    for name in VIEW_NAMES:
        t, table = timed(lambda n=name: analytics.relation(f'SELECT * FROM "{n}"').to_arrow_table())
        view_times[name] = t
        print(f"view {name:<24} {t:6.2f} s  ({table.num_rows:,} rows)  target <= 3 s")
    rss = peak_rss_gib()
    print(f"peak RSS (sync + views) {rss:.2f} GiB  (target < 4 GiB)")
    if args.skip_pandas:
        return

    df = analytics.relation("SELECT * FROM token_usage").to_arrow_table().to_pandas()
    idle = analytics.settings.idle_window_s
    t_pd_stick, _ = timed(lambda: pandas_stickiness(df, idle))
    t_pd_cache, _ = timed(lambda: pandas_cache_hits(df))
    for view, baseline in (
        ("session_stickiness", t_pd_stick),
        ("agent_stickiness", t_pd_stick),
        ("cache_hits", t_pd_cache),
    ):
        ratio = baseline / view_times[view]
        print(
            f"pandas vs {view:<20} pandas {baseline:6.2f} s  DuckDB {view_times[view]:6.2f} s"
            f"  -> {ratio:5.1f}x  (target >= 10x)"
        )
    print(f"peak RSS incl. pandas  {peak_rss_gib():.2f} GiB")
    analytics.close()


if __name__ == "__main__":
    main()
