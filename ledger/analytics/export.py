"""Parquet export of ``token_usage``, one Hive-style folder per UTC day.

``DIR/day=2025-01-31/data.parquet``: the layout DuckDB, Spark, Trino and
ClickHouse all read as a partitioned table (``read_parquet('DIR/*/*.parquet',
hive_partitioning = true)``). Types survive: TIMESTAMPTZ as a UTC-adjusted
timestamp, cost as DECIMAL(20,10), tags as JSON text. Days are written one by
one so a progress bar can follow, and a re-export replaces each day's file.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import duckdb

from ledger.analytics.sync import ProgressCallback
from ledger.schema import TABLE_NAME

PARTITION: Final = "day"
FILE_NAME: Final = "data.parquet"

# started_at AT TIME ZONE 'UTC' is the naive UTC wall time, so the day is the
# UTC day whatever the session's time zone.
_DAYS: Final = f"""
SELECT CAST(started_at AT TIME ZONE 'UTC' AS DATE) AS day, count(*) AS n
FROM {TABLE_NAME} GROUP BY day ORDER BY day
"""  # noqa: S608
_ONE_DAY: Final = f"""
SELECT * FROM {TABLE_NAME}
WHERE started_at >= timezone('UTC', CAST($day AS TIMESTAMP))
  AND started_at < timezone('UTC', CAST($day AS TIMESTAMP) + INTERVAL 1 DAY)
ORDER BY id
"""  # noqa: S608


@dataclass(frozen=True, slots=True)
class ExportResult:
    directory: Path
    days: int
    rows: int


def day_file(directory: Path, day: dt.date) -> Path:
    return directory / f"{PARTITION}={day.isoformat()}" / FILE_NAME


def export_parquet(
    con: duckdb.DuckDBPyConnection,
    directory: Path,
    *,
    progress: ProgressCallback | None = None,
) -> ExportResult:
    """Write every synced row under ``directory``; returns what was written."""
    days = con.execute(_DAYS).fetchall()
    total = sum(int(n) for _, n in days)
    done = 0
    for day, n in days:
        target = day_file(directory, day)
        target.parent.mkdir(parents=True, exist_ok=True)
        # COPY cannot take its query's values as parameters, so the day's rows
        # are a parameterised relation written with to_parquet().
        rel = con.sql(_ONE_DAY, params={"day": day})
        rel.to_parquet(str(target), compression="zstd")
        done += int(n)
        if progress is not None:
            progress(done, total)
    return ExportResult(directory, len(days), total)
