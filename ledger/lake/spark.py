"""The analytics views on Apache Spark, over a ledger lake: locally or with ``spark-submit``.

Locally (``pip install 'ledger[spark]'``, Java 17)::

    from ledger.lake.spark import local_session, register_views
    spark = local_session()
    register_views(spark, "/data/ledger-lake")
    spark.sql("SELECT * FROM provider_order_verdict").show()

On a cluster, this module is the job: it registers the views over the lake and
writes each one as a Parquet table under ``--out``::

    job=$(python -c 'import ledger.lake.spark as m; print(m.__file__)')
    spark-submit --py-files ledger.zip "$job" \\
        --lake s3a://bucket/ledger-lake --out s3a://bucket/ledger-views

The views are the DuckDB definitions rewritten by :mod:`ledger.lake.spark_sql`,
so both engines answer from one text; over a lake with a current derived state
(``ledger lake derive``) the stored variants read its state tables, as
:mod:`ledger.lake.duck` does. Spark runs with the session time zone
UTC (the views bucket by UTC day) and reads only the files the lake's manifest
commits.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ledger.analytics.models import verdict_sentences
from ledger.analytics.read import cache_rates
from ledger.analytics.settings import AnalyticsSettings
from ledger.lake import derive
from ledger.lake import manifest as mf
from ledger.lake.export import PARTITION, lake_schema, open_target
from ledger.lake.spark_sql import to_spark
from ledger.lake.views import (
    PROVIDER_ATTEMPTS,
    PROVIDER_PAIRS,
    definitions,
    model_prices,
    settings_values,
)
from ledger.schema import TABLE_NAME

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Spark's schemes for object stores, and the ``pyarrow.fs`` ones that read the manifest.
_ARROW_SCHEMES: Final = {"s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs"}


def local_session(
    app_name: str = "ledger-views", cores: int = 2, driver_memory: str = "1g"
) -> SparkSession:
    """A local Spark session set up as the views need (UTC, no UI, few shuffle partitions).

    In local mode the driver is the executor: ``driver_memory`` (a JVM size,
    ``"4g"``) is the heap every task shares, read when the JVM starts, so only
    by the first session of a process.
    """
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(f"local[{cores}]")
        .config("spark.driver.memory", driver_memory)
        .appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # The views aggregate small results: a few shuffle partitions, not 200.
        .config("spark.sql.shuffle.partitions", str(cores))
        .getOrCreate()
    )


def read_lake(spark: SparkSession, lake: str | Path) -> DataFrame:
    """The lake's committed rows, typed as :func:`ledger.lake.export.lake_schema`."""
    uri = _spark_uri(lake)
    filesystem, root = open_target(_arrow_uri(uri))
    return _lake_frame(spark, uri, mf.read(filesystem, root))


def _lake_frame(spark: SparkSession, uri: str, manifest: mf.Manifest) -> DataFrame:
    from pyspark.sql.pandas.types import from_arrow_schema

    files = [f"{uri}/{f.path}" for f in manifest.files]
    schema = from_arrow_schema(lake_schema())
    if not files:
        return spark.createDataFrame([], schema)
    frame = spark.read.option("basePath", uri).schema(schema).parquet(*files)
    return frame.drop(PARTITION) if PARTITION in frame.columns else frame


def register_views(
    spark: SparkSession,
    lake: str | Path,
    settings: AnalyticsSettings | None = None,
    *,
    materialize: bool = False,
) -> list[str]:
    """Register ``token_usage`` and every analytics view as temporary views; their names.

    ``materialize``: compute each view as it is registered (``localCheckpoint``), so a
    view over others reads their rows instead of their plans. Spark analyses a temp
    view's whole plan, nested views included, each time it is used: the verdict, over
    a dozen views, takes minutes to plan. For a job that reads every view; a session
    that reads a few is better off lazy.
    """

    def register(frame: DataFrame, name: str) -> None:
        (frame.localCheckpoint() if materialize else frame).createOrReplaceTempView(name)

    uri = _spark_uri(lake)
    filesystem, root = open_target(_arrow_uri(uri))
    manifest = derive.lake_manifest(filesystem, root, str(lake))
    # the one decision ledger.lake.duck makes too: the state when current, else the rows
    state = derive.current(filesystem, root, manifest, target=str(lake))
    register(_lake_frame(spark, uri, manifest), TABLE_NAME)
    if state is not None:
        for table in derive.TABLES:
            spark.read.parquet(f"{uri}/{state.path(table)}").createOrReplaceTempView(table)
    counts = [tuple(r) for r in spark.sql(PROVIDER_ATTEMPTS).collect()]
    spark.createDataFrame(
        model_prices(counts),
        "requested_model string, provider string, discount_per_mtok decimal(20,10)",
    ).createOrReplaceTempView("model_prices")
    pairs = [(str(r[0]), str(r[1])) for r in spark.sql(PROVIDER_PAIRS).collect()]
    rates = cache_rates.rows(pairs)
    spark.createDataFrame(rates, cache_rates.SPARK_SCHEMA).createOrReplaceTempView("cache_rates")
    values = settings_values(settings)
    names: list[str] = []
    for name, body in definitions(stored=state is not None):
        if name == "provider_order_verdict":
            # its sentences, written by Python on the driver from the typed figures
            figures = [r.asDict(recursive=True) for r in spark.table("verdict_figures").collect()]
            spark.createDataFrame(
                verdict_sentences.spark_rows(figures), verdict_sentences.SPARK_SCHEMA
            ).createOrReplaceTempView(verdict_sentences.TABLE)
        register(spark.sql(to_spark(body, values)), name)
        names.append(name)
    return names


def _spark_uri(lake: str | Path) -> str:
    text = str(lake)
    if "://" in text:
        return text.rstrip("/")
    return Path(text).expanduser().resolve().as_uri()


def _arrow_uri(spark_uri: str) -> str:
    scheme, _, rest = spark_uri.partition("://")
    return f"{_ARROW_SCHEMES.get(scheme, scheme)}://{rest}"


def main(argv: Sequence[str] | None = None) -> None:
    """``spark-submit …/spark.py --lake URI --out URI [--view NAME …]``."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--lake", required=True, help="the lake written by `ledger export`")
    parser.add_argument("--out", required=True, help="where each view is written as Parquet")
    parser.add_argument("--view", action="append", help="only these views (repeatable)")
    args = parser.parse_args(argv)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.appName("ledger-views")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    names = register_views(spark, args.lake, materialize=not args.view)
    for name in args.view or names:
        spark.table(name).write.mode("overwrite").parquet(f"{args.out.rstrip('/')}/{name}")


if __name__ == "__main__":
    main()
