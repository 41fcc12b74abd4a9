"""The ledger beyond one machine: an incremental Parquet lake and the views on Spark.

- :mod:`ledger.lake.export`: ``ledger export``, the analytics copy appended to a
  Hive-partitioned Parquet lake (local path or object store) with a manifest.
- :mod:`ledger.lake.duck`: the views over a lake in DuckDB.
- :mod:`ledger.lake.spark`: the same views on Apache Spark (``pyspark``, an
  optional extra), locally or as a ``spark-submit`` job.
"""
