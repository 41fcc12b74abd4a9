"""The DuckDB views as Spark SQL, checked without starting Spark.

The Spark equality tests (``test_spark.py``) are slow and need Java; these fail
in a second when a view starts using a DuckDB function Spark lacks (they
caught ``list_slice`` and ``format('{:,}', n)`` after the fact).
"""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from ledger.lake.spark_sql import to_spark
from ledger.lake.views import definitions, settings_values

#: Functions sqlglot does not model that Spark has (checked against Spark 4's built-ins).
SPARK_ONLY: frozenset[str] = frozenset({"format_number"})


#: Every view as computed from rows, and the stored variants that read a derived state.
BODIES = [*definitions(), *((f"stored {n}", b) for n, b in definitions(stored=True))]


@pytest.mark.parametrize(("name", "body"), BODIES, ids=lambda v: str(v)[:40])
def test_every_view_uses_only_functions_spark_has(name: str, body: str) -> None:
    tree = sqlglot.parse_one(to_spark(body, settings_values(None)), read="spark")
    unknown = {f.name.lower() for f in tree.find_all(exp.Anonymous)} - SPARK_ONLY
    assert not unknown, f"{name} calls {sorted(unknown)}, which Spark does not have"
    for call in tree.find_all(exp.Format):
        assert "{" not in call.this.sql(), f"{name}: a DuckDB format() pattern reached Spark"


def test_thousands_separators_become_format_number() -> None:
    spark = to_spark("SELECT format('{:,}', n) AS shown FROM t", {})
    assert spark == "SELECT FORMAT_NUMBER(n, 0) AS shown FROM t"


def test_a_format_pattern_without_a_spark_form_is_refused() -> None:
    with pytest.raises(ValueError, match="no Spark form"):
        to_spark("SELECT format('{:>8}', n) FROM t", {})


def test_a_literal_list_index_is_one_based_and_null_out_of_range_on_spark() -> None:
    assert to_spark("SELECT x[1] FROM t", {}) == "SELECT TRY_ELEMENT_AT(x, 1) FROM t"


def test_a_list_length_is_a_size_on_spark() -> None:
    assert to_spark("SELECT array_length(x) FROM t", {}) == "SELECT SIZE(x) FROM t"
