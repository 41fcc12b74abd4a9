"""The lake at scale: incremental export, and every view on DuckDB and on Spark, one run.

    .venv/bin/python bench/bench_lake.py --rows 1000000
    .venv/bin/python bench/bench_lake.py --rows 10000000 --workdir /tmp/ledger-lake-bench

Generates ``--rows`` synthetic ledger rows (bench_analytics' generator: sessions
of 20 calls on six upstreams, keyed and not, errors, response-cache hits) into
an in-memory DuckDB table, then measures:

- ``ledger export`` of all of them into a fresh lake, and a second export with
  nothing new (the incremental path: must write nothing, quickly);
- every analytics view over the lake in DuckDB (``ledger.lake.duck``) and in
  Spark local mode (``ledger.lake.spark``), each fully materialised
  (``count(*)`` over the view's rows would let an engine skip work), run in
  interleaved rounds and reported as medians, with Spark / DuckDB per view.

Spark is for the cluster, not for one machine: on 2 cores its JVM, planner and
shuffles cost more than DuckDB's whole query, and the ratio says so honestly.
Peak RSS is this process only (Spark's JVM is another process).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import time
from collections.abc import Mapping
from pathlib import Path

import duckdb
from bench_analytics import GENERATOR_SQL

from ledger.analytics.local import table_ddl
from ledger.analytics.views import VIEW_NAMES
from ledger.lake import duck
from ledger.lake.export import export_lake
from ledger.schema import TABLE_NAME


class Generated:
    """A DuckDB table of generated rows, read as ``export_lake`` reads an Analytics copy."""

    def __init__(self, rows: int) -> None:
        self.con = duckdb.connect()
        self.con.execute("SET TimeZone = 'UTC'")
        self.con.execute(table_ddl())
        columns = ", ".join(
            c for c in self.con.table(TABLE_NAME).columns if c in _GENERATED_COLUMNS
        )
        # The generator predates usage_reported: its rows all reported usage.
        self.con.execute(
            f"INSERT INTO {TABLE_NAME} ({columns}, usage_reported) "
            f"SELECT {columns}, TRUE FROM ({GENERATOR_SQL})",
            {"first": 1, "stop": rows + 1},
        )

    def relation(
        self, query: str, parameters: Mapping[str, object] | None = None
    ) -> duckdb.DuckDBPyRelation:
        return self.con.cursor().sql(query, params=dict(parameters or {}))


_GENERATED_COLUMNS = set(
    duckdb.sql(f"DESCRIBE {GENERATOR_SQL}", params={"first": 1, "stop": 2})
    .df()["column_name"]
    .tolist()
)


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 / 1024


def timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ledger-lake-bench"))
    parser.add_argument("--skip-spark", action="store_true")
    args = parser.parse_args()

    lake = args.workdir / "lake"
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    t = time.perf_counter()
    source = Generated(args.rows)
    print(f"generated {args.rows:,} rows in {time.perf_counter() - t:.1f} s")

    first = time.perf_counter()
    result = export_lake(source, lake)
    first = time.perf_counter() - first
    again = time.perf_counter()
    nothing = export_lake(source, lake)
    again = time.perf_counter() - again
    assert nothing.new_rows == 0 and result.total_rows == args.rows
    print(
        f"export: {result.new_rows:,} rows in {result.new_files} files {first:.1f} s "
        f"({result.new_rows / first:,.0f} rows/s); again with nothing new {again:.2f} s"
    )
    source.con.close()

    con = duck.connect(lake)
    spark = None
    if not args.skip_spark:
        from ledger.lake.spark import local_session, register_views

        t = time.perf_counter()
        spark = local_session(app_name="ledger-bench")
        spark.sparkContext.setLogLevel("ERROR")
        register_views(spark, lake)
        print(f"spark session and views registered in {time.perf_counter() - t:.1f} s")

    times: dict[str, dict[str, list[float]]] = {v: {"duckdb": [], "spark": []} for v in VIEW_NAMES}
    for _ in range(args.rounds):  # interleaved: each round runs every view in both engines
        for view in VIEW_NAMES:
            query = f"SELECT * FROM {view}"
            times[view]["duckdb"].append(timed(lambda q=query: con.sql(q).to_arrow_table()))
            if spark is not None:
                times[view]["spark"].append(timed(lambda q=query: spark.sql(q).collect()))

    print(f"\nviews over {args.rows:,} rows, median of {args.rounds} interleaved rounds")
    print(f"{'view':<24} {'duckdb s':>9} {'spark s':>9} {'spark/duckdb':>13}")
    for view in VIEW_NAMES:
        d = statistics.median(times[view]["duckdb"])
        s = statistics.median(times[view]["spark"]) if spark is not None else float("nan")
        print(f"{view:<24} {d:>9.3f} {s:>9.3f} {s / d:>12.1f}x")
    print(f"\npeak RSS of this process: {peak_rss_gib():.2f} GiB")
    if spark is not None:
        spark.stop()


if __name__ == "__main__":
    main()
