"""Where the verdict's two prose columns come from in each engine.

``provider_order_verdict`` is ``verdict_figures`` (typed) joined with
``verdict_sentences (requested_model, headline, reason)``, whose text
:mod:`ledger.analytics.read.verdict_words` writes. Contract §2 and the README show
``headline`` and ``reason`` read by any DuckDB client of the analytics file,
which cannot call Python, so:

- in the analytics file it is a table, written by :class:`Analytics` from the
  unfiltered verdict whenever it may have changed (rows synced, settings
  changed, a new version's views) before anything reads it through SQL, and
  on close (:func:`write_table`); a filtered read gets its sentences written
  from its own figures (:func:`with_sentences`), never from the table;
- over a lake in DuckDB it is a view calling a Python function registered on
  the connection (:func:`register_duckdb`): lazy, like the other views;
- on Spark it is a small DataFrame written on the driver from the collected
  ``verdict_figures`` (one row per model; :func:`spark_rows`), so Spark's
  workers need no ledger package.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import duckdb
import pandas as pd  # type: ignore[import-untyped]

from ledger.analytics.read import verdict_words
from ledger.analytics.read.verdict import from_row

TABLE: Final = "verdict_sentences"
DDL: Final = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} "
    "(requested_model VARCHAR NOT NULL, headline VARCHAR, reason VARCHAR)"
)
#: Spark's schema of the same rows.
SPARK_SCHEMA: Final = "requested_model string, headline string, reason string"

_UDF: Final = "ledger_verdict_sentence"
_LAKE_VIEW: Final = """
CREATE OR REPLACE VIEW verdict_sentences AS
SELECT
    f.requested_model,
    ledger_verdict_sentence(CAST(to_json(f) AS VARCHAR), 'headline') AS headline,
    ledger_verdict_sentence(CAST(to_json(f) AS VARCHAR), 'reason') AS reason
FROM verdict_figures AS f
"""


def sentences(row: Mapping[str, Any]) -> tuple[str, str]:
    """``(headline, reason)`` of one ``verdict_figures`` row."""
    verdict = from_row(row)
    return verdict_words.headline(verdict), verdict_words.reason(verdict)


def with_sentences(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (verdict rows) with ``headline`` and ``reason`` written from its figures."""
    written = [sentences(row) for row in frame.to_dict("records")]
    return frame.assign(
        headline=[h for h, _ in written] or pd.Series(dtype=object),
        reason=[r for _, r in written] or pd.Series(dtype=object),
    )


def write_table(con: duckdb.DuckDBPyConnection) -> None:
    """Write every model's sentences from the unfiltered ``verdict_figures``, in one
    transaction (a reader sees the old rows or the new ones)."""
    cursor = con.cursor()
    try:
        relation = cursor.sql("SELECT * FROM verdict_figures")
        columns = relation.columns
        rows = [(r[0], *sentences(dict(zip(columns, r, strict=True)))) for r in relation.fetchall()]
        cursor.execute("BEGIN TRANSACTION")
        cursor.execute(f"DELETE FROM {TABLE}")  # noqa: S608 (a constant)
        if rows:
            cursor.executemany(f"INSERT INTO {TABLE} VALUES (?, ?, ?)", rows)  # noqa: S608
        cursor.execute("COMMIT")
    finally:
        cursor.close()


def _sentence(figures_json: str, which: str) -> str:
    headline, reason = sentences(json.loads(figures_json))
    return headline if which == "headline" else reason


def register_duckdb(con: duckdb.DuckDBPyConnection) -> None:
    """Register the sentence function on ``con`` (an in-memory lake connection whose
    ``verdict_figures`` view exists) and define ``verdict_sentences`` over it."""
    con.create_function(_UDF, _sentence, ["VARCHAR", "VARCHAR"], "VARCHAR", side_effects=False)
    con.execute(_LAKE_VIEW)


def spark_rows(figures: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """``verdict_sentences`` rows for Spark from its collected ``verdict_figures`` rows."""
    return [(str(row["requested_model"]), *sentences(row)) for row in figures]
