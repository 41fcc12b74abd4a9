"""The analytics views' DuckDB SQL, rewritten for Spark SQL: one definition, two engines.

Each view is written once, in ``ledger/analytics/sql/<name>.sql`` (DuckDB's
dialect). :func:`to_spark` turns a view body into Spark SQL with `sqlglot`_,
plus the few rewrites sqlglot does not make itself, each of which keeps the
DuckDB meaning exactly:

- ``ledger_setting('name')`` (a DuckDB macro over the ``ledger_settings``
  table) becomes the setting's value as a literal: Spark has no macros, and the
  settings of one run are fixed.
- ``epoch_us(ts)`` becomes ``unix_micros(ts)``.
- ``quantile_cont(x, q)`` becomes ``percentile(x, q)``: both interpolate
  linearly between the two nearest ranks (numpy's default). Spark's
  ``percentile_cont`` is the WITHIN GROUP form, which sqlglot does not write.
- ``quantile_disc(x, q)`` becomes ``percentile_disc(q) WITHIN GROUP (ORDER BY x)``.
- ``len(list)`` becomes ``size(list)`` (sqlglot reads DuckDB's ``len`` as a
  string length).
- ``list[i]`` (1-based; NULL out of range or at 0) becomes
  ``try_element_at(list, CAST(i AS INT))`` (1-based; NULL out of range, an
  error at 0, so 0 is tested first; Spark takes an INT position only).
  sqlglot shifts only literal indexes (to 0-based, which Spark's ``list[0]``
  reads but fails out of range): a literal ``list[1]`` becomes
  ``try_element_at(list, 1)``.
- A list's length is written ``array_length(list)`` in the views: sqlglot
  reads DuckDB's ``len(column)`` as a string length.
- Named windows (``WINDOW part AS (…)``, used as ``OVER (part ORDER BY …)``)
  are inlined: Spark cannot extend a named window.
- ``a // b`` becomes ``floor(a / b)``: Spark's ``DIV`` takes integers only,
  DuckDB's ``//`` floors doubles too (the views divide non-negative values, for
  which truncating and flooring agree).
- ``first(x ORDER BY k1, k2 …)`` (an ordered aggregate Spark lacks) becomes
  ``min_by(x, struct(k1 IS NULL, k1, k2 IS NULL, k2, …))``: structs compare
  field by field, and the ``IS NULL`` fields put NULL keys last, as DuckDB
  does. A descending key is negated, so it must be numeric.
- ``a / b`` becomes ``CAST(a AS DOUBLE) / b``: DuckDB divides DECIMALs (and
  integers) as DOUBLE, Spark keeps a DECIMAL and rounds it to the scale its
  precision rules leave (six places, often), so a cost divided by a million
  tokens would differ in the fifth significant digit.
- ``printf`` patterns: Spark formats with ``java.util.Formatter``, whose ``%g``
  keeps trailing zeros where C's drops them, so ``%g`` arguments are printed
  as the shortest decimal instead (``45.0`` -> ``45``, ``2.5`` -> ``2.5``);
  numeric arguments of ``%f`` are cast to DOUBLE (Java refuses a BIGINT or a
  DECIMAL of scale 0 for ``%f``, C converts).

A view that uses something neither sqlglot nor this module translates fails
loudly in Spark's analyser, and the equality test over every view
(``tests/lake/test_spark.py``) keeps the two engines in step.

.. _sqlglot: https://github.com/tobymao/sqlglot
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final, cast

import sqlglot
from sqlglot import exp, transforms

from ledger.lake.views import inline_settings

_MAX_PASSES: Final = 10
_PRINTF_SPEC: Final = re.compile(r"%(?:%|[-#+ 0,(]*\d*(?:\.\d+)?([a-zA-Z]))")


# DuckDB's len() of these is a list length; sqlglot reads len() as a string length.
_ARRAY_VALUED: Final = (exp.ArrayFilter, exp.ArraySort, exp.Array, exp.ArrayDistinct, exp.ArrayAgg)


def to_spark(duckdb_sql: str, settings: Mapping[str, float]) -> str:
    """One DuckDB statement (a view body) as Spark SQL."""
    tree = sqlglot.parse_one(inline_settings(duckdb_sql, settings), read="duckdb")
    # sqlglot does not descend into a node a transform replaced, so a rewrite
    # nested in another (epoch_us inside a ``//``) is reached by the next pass;
    # every rewrite produces nodes no rewrite matches again, so this ends. The
    # rewrites that rebuild a call around its arguments (printf, first) come
    # second in each pass, after the ones that may sit inside those arguments.
    text = tree.sql(dialect="spark")
    for _ in range(_MAX_PASSES):
        tree = tree.transform(_rewrite).transform(_rewrite_calls)
        rewritten = tree.sql(dialect="spark")
        if rewritten == text:
            return rewritten
        text = rewritten
    raise RuntimeError(f"the Spark rewrites did not settle in {_MAX_PASSES} passes")


def _rewrite(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Select):
        return cast(exp.Expression, transforms.eliminate_window_clause(node))
    if isinstance(node, exp.Length) and isinstance(node.this, _ARRAY_VALUED):
        return exp.Anonymous(this="size", expressions=[node.this])
    if isinstance(node, exp.Anonymous):
        name = node.name.lower()
        if name == "epoch_us":
            return exp.Anonymous(this="unix_micros", expressions=node.expressions)
    if isinstance(node, exp.Bracket) and len(node.expressions) == 1:
        index = node.expressions[0]
        if isinstance(index, exp.Literal) and not index.is_string:
            # sqlglot holds a literal index 0-based already; NULL out of range, as DuckDB
            first_based = exp.Literal.number(int(str(index.this)) + 1)
            return exp.Anonymous(this="try_element_at", expressions=[node.this, first_based])
        if not (isinstance(index, exp.Literal) and index.is_string):
            # Spark's element_at takes an INT position; DuckDB's arithmetic gives BIGINTs
            position = exp.cast(index.copy(), exp.DataType.Type.INT)
            element = exp.Anonymous(this="try_element_at", expressions=[node.this, position])
            zero = exp.EQ(this=index.copy(), expression=exp.Literal.number(0))
            return exp.If(this=zero, true=exp.Null(), false=element)
    if isinstance(node, exp.Div) and not _is_double(node.this):
        return exp.Div(
            this=exp.cast(node.this, exp.DataType.Type.DOUBLE), expression=node.expression
        )
    if isinstance(node, exp.IntDiv):
        return exp.Floor(this=exp.Div(this=node.this, expression=node.expression))
    if isinstance(node, exp.PercentileCont) and node.expression is not None:
        return exp.Anonymous(this="percentile", expressions=[node.this, node.expression])
    if isinstance(node, exp.PercentileDisc) and node.expression is not None:
        ordered = exp.Order(expressions=[exp.Ordered(this=node.this, nulls_first=False)])
        return exp.WithinGroup(
            this=exp.Anonymous(this="percentile_disc", expressions=[node.expression]),
            expression=ordered,
        )
    return node


def _is_double(node: exp.Expression) -> bool:
    return isinstance(node, exp.Cast) and node.to.is_type(exp.DataType.Type.DOUBLE)


def _rewrite_calls(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Anonymous) and node.name.lower() == "printf":
        return _printf(node)
    if isinstance(node, exp.First) and isinstance(node.this, exp.Order):
        return _ordered_first(node.this)
    if isinstance(node, exp.Format):
        return _grouped_integer(node)
    return node


def _grouped_integer(node: exp.Format) -> exp.Expression:
    """DuckDB's ``format('{:,}', n)`` (thousands separators) is Spark's ``format_number(n, 0)``;
    Spark's ``format_string`` would print the pattern itself."""
    pattern = node.this
    if not (
        isinstance(pattern, exp.Literal) and pattern.this == "{:,}" and len(node.expressions) == 1
    ):
        raise ValueError(f"no Spark form for DuckDB format({pattern.sql()}, ...)")
    return exp.Anonymous(
        this="format_number", expressions=[node.expressions[0], exp.Literal.number(0)]
    )


def _ordered_first(order: exp.Order) -> exp.Expression:
    fields: list[exp.Expression] = []
    for key in order.expressions:
        value = exp.Neg(this=exp.paren(key.this)) if key.args.get("desc") else key.this
        null_flag: exp.Expression = exp.Is(this=key.this.copy(), expression=exp.Null())
        if key.args.get("nulls_first"):
            null_flag = exp.Not(this=null_flag)
        fields += [null_flag, value]
    ranking = exp.Anonymous(this="struct", expressions=fields)
    return exp.Anonymous(this="min_by", expressions=[order.this, ranking])


def _printf(node: exp.Anonymous) -> exp.Expression:
    pattern, *args = node.expressions
    if not (isinstance(pattern, exp.Literal) and pattern.is_string):
        return node
    conversions = [m.group(1) for m in _PRINTF_SPEC.finditer(pattern.this) if m.group(1)]
    if len(conversions) != len(args):
        raise ValueError(f"printf pattern {pattern.this!r} takes {len(conversions)} arguments")
    text = pattern.this
    rewritten: list[exp.Expression] = []
    for conversion, arg in zip(conversions, args, strict=True):
        if conversion == "g":
            rewritten.append(_shortest_decimal(arg))
        elif conversion == "f":
            rewritten.append(exp.cast(arg, exp.DataType.Type.DOUBLE))
        else:
            rewritten.append(arg)
    text = re.sub(r"%g", "%s", text)
    return exp.Anonymous(this="format_string", expressions=[exp.Literal.string(text), *rewritten])


def _shortest_decimal(arg: exp.Expression) -> exp.Expression:
    """C's ``%g`` for the values the views label (seconds): no trailing ``.0``."""
    as_text = exp.cast(exp.cast(arg, exp.DataType.Type.DOUBLE), exp.DataType.Type.TEXT)
    return exp.Anonymous(
        this="regexp_replace",
        expressions=[as_text, exp.Literal.string(r"\.0$"), exp.Literal.string("")],
    )
