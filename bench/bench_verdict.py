"""provider_order_verdict at scale: its time next to the pre-tail views, medians of rounds.

    PYTHONPATH=. .venv/bin/python bench/bench_verdict.py --rows 1000000 3000000
    PYTHONPATH=. .venv/bin/python bench/bench_verdict.py --rows 3000000 --latencies 7000000

For each ``--rows``: a synthetic SQLite ledger (bench_analytics' generator, kept
in ``--workdir`` for the next run) synced into a fresh DuckDB file, then
``--rounds`` interleaved rounds (the order alternates) of

- *baseline*: the verdict with the stored ``upstream_scorecard`` and
  ``upstream_p95_intervals`` as they were before the kept latency bands
  (``bench/verdict_baseline.sql``: they rank every served latency), and
- *bands*: the verdict with the views the package installs,

each timed as the whole result fetched; medians printed, and both answers
checked equal. The same for the verdict's latency part alone (the p95 interval
and the scorecard's p95). ``--reuse`` keeps an earlier run's DuckDB file.
Target (issue 13): the verdict <= 1 s at 10M rows, its latency part no longer
growing with the rows the way the baseline's does.

``--latencies N`` (10M rows served through the writer take long on a loaded
machine): after the sync, ``state_latency`` is grown to N served latencies by
repeating each group's own latencies (new ids), and the bands are cut again as
a sync would, so the latency part of the state is that of a much larger ledger
while the rest stays that of ``--rows``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

import bench_analytics  # beside this script
import duckdb

from ledger.analytics import Analytics
from ledger.analytics.models import views
from ledger.analytics.state import latency_bands

BASELINE = Path(__file__).with_name("verdict_baseline.sql")
BAND_VIEWS = ("upstream_scorecard", "upstream_p95_intervals")
VERDICT = "SELECT * FROM provider_order_verdict ORDER BY ALL"
#: What the verdict reads of the latencies: the p95 interval, and the scorecard's p95 column.
LATENCY_PART = (
    "SELECT * FROM upstream_p95_intervals "
    "JOIN (SELECT requested_model, upstream, p95_latency_ms FROM upstream_scorecard) "
    "USING (requested_model, upstream) ORDER BY ALL"
)


def sync(rows: int, workdir: Path, *, reuse: bool) -> Path:
    ledger = workdir / f"ledger-{rows}.db"
    if not ledger.exists():
        started = time.perf_counter()
        bench_analytics.build_ledger(ledger, rows)
        print(f"generated {rows:,} rows in {time.perf_counter() - started:.0f} s")
    duck = workdir / f"verdict-{rows}.duckdb"
    if reuse and duck.exists():
        return duck
    duck.unlink(missing_ok=True)
    started = time.perf_counter()
    Analytics(f"sqlite:///{ledger}", path=duck).close()
    print(f"initial sync of {rows:,} rows: {time.perf_counter() - started:.0f} s")
    return duck


def grow_latencies(con: duckdb.DuckDBPyConnection, target: int) -> None:
    """Repeat each group's latencies until state_latency holds about ``target``; re-cut."""
    (have,) = con.execute("SELECT count(*) FROM state_latency").fetchone() or (0,)
    copies = max(1, math.ceil(target / have))
    con.execute(
        "CREATE TEMP TABLE grown AS SELECT gid, latency_ms, "
        "id + k * (SELECT max(id) FROM state_latency) AS id "
        "FROM state_latency, range(1, ?) AS r(k)",
        [copies],
    )
    con.execute("INSERT INTO state_latency SELECT * FROM grown")
    latency_bands.add(con, "grown")
    con.execute("DROP TABLE grown")
    con.execute("CHECKPOINT")


def install(con: duckdb.DuckDBPyConnection, which: str) -> None:
    if which == "baseline":
        con.execute(BASELINE.read_text("utf-8"))
    else:
        for name in BAND_VIEWS:
            con.execute(views.stored_view_sql(name))


def timed(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[float, list[tuple[object, ...]]]:
    started = time.perf_counter()
    rows = con.execute(sql).fetchall()
    return time.perf_counter() - started, rows


def same(a: list[tuple[object, ...]], b: list[tuple[object, ...]]) -> bool:
    def close(x: object, y: object) -> bool:
        if isinstance(x, float) and isinstance(y, float):
            return math.isclose(x, y, rel_tol=1e-9) or (math.isnan(x) and math.isnan(y))
        return x == y

    return len(a) == len(b) and all(
        len(r) == len(s) and all(close(x, y) for x, y in zip(r, s, strict=True))
        for r, s in zip(a, b, strict=True)
    )


def bench(duck: Path, rounds: int, label: str) -> None:
    con = duckdb.connect(str(duck))
    try:
        (n, kept) = con.execute(
            "SELECT (SELECT count(*) FROM state_latency), "
            f"(SELECT count(*) FROM {latency_bands.BAND})"
        ).fetchone() or (0, 0)
        print(f"{label}: {n:,} served latencies, {kept:,} kept ({kept / max(n, 1):.1%})")
        for what, sql in (("verdict", VERDICT), ("latency part", LATENCY_PART)):
            times: dict[str, list[float]] = {"baseline": [], "bands": []}
            answers: dict[str, list[tuple[object, ...]]] = {}
            for r in range(rounds):
                order = ("baseline", "bands") if r % 2 == 0 else ("bands", "baseline")
                for which in order:
                    install(con, which)
                    t, answers[which] = timed(con, sql)
                    times[which].append(t)
            install(con, "bands")
            base, bands = (statistics.median(times[w]) for w in ("baseline", "bands"))
            equal = same(answers["baseline"], answers["bands"])
            print(
                f"  {what:<12} median of {rounds}: baseline {base:.3f} s, bands {bands:.3f} s "
                f"({base / bands:.1f}x); same answer: {equal}"
            )
    finally:
        con.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 3_000_000])
    parser.add_argument("--latencies", type=int, help="grow state_latency to this many")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ledger-bench"))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reuse", action="store_true", help="keep an earlier run's DuckDB file")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    for rows in args.rows:
        duck = sync(rows, args.workdir, reuse=args.reuse)
        bench(duck, args.rounds, f"{rows:,} rows")
        if args.latencies:
            con = duckdb.connect(str(duck))
            try:
                grow_latencies(con, args.latencies)
            finally:
                con.close()
            bench(duck, args.rounds, f"{rows:,} rows, latencies grown")


if __name__ == "__main__":
    main()
