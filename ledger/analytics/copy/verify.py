"""The consistency check: does the analytics copy hold what the ledger holds?

``ledger sync --verify`` (and :meth:`Analytics.verify`) compare, in one
snapshot of the ledger:

* the row count and the highest id;
* per requested model and UTC day: rows, input/output/cache-read tokens and
  cost (exact on PostgreSQL; within float rounding on SQLite, which keeps
  costs as REAL);
* per session (session_id, actor_id, requested_model): rows;

and the copy's state tables against its own rows (rows and cost per model in
``state_rollup``), then list every figure that differs, keyed exactly. A
difference means the copy missed something (a change-log gap given up on, see
:mod:`ledger.analytics.copy.gaps`, or a file edited by hand): ``ledger sync --full``
rebuilds it.
"""

# Every SQL string here is a module constant over ledger.schema names.
# ruff: noqa: S608
from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

import duckdb

from ledger.analytics.copy.source import LedgerSnapshot
from ledger.schema import TABLE_NAME

#: Cost sums on SQLite are doubles: differences below this are rounding.
SQLITE_COST_TOLERANCE: Final = Decimal("1e-6")

_FIGURES: Final = (
    "count(*) AS n, sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens, "
    "sum(cache_read_tokens) AS cache_read_tokens, {cost} AS cost_usd"
)
_DAY: Final = {
    "postgresql": "((started_at AT TIME ZONE 'UTC')::date)::text",
    "sqlite": "substr(started_at, 1, 10)",
    "duckdb": "CAST(CAST(timezone('UTC', started_at) AS DATE) AS VARCHAR)",
}
_COST: Final = {
    "postgresql": "sum(cost_usd)::text",
    "sqlite": "CAST(sum(cost_usd) AS TEXT)",
    "duckdb": "CAST(sum(cost_usd) AS VARCHAR)",
}


def _totals(dialect: str) -> str:
    return f"SELECT count(*), max(id) FROM {TABLE_NAME}"


def _per_model_day(dialect: str) -> str:
    return (
        f"SELECT requested_model, {_DAY[dialect]} AS day, "
        f"{_FIGURES.format(cost=_COST[dialect])} FROM {TABLE_NAME} "
        f"GROUP BY requested_model, {_DAY[dialect]}"
    )


def _per_session() -> str:
    return (
        f"SELECT session_id, actor_id, requested_model, count(*) FROM {TABLE_NAME} "
        "WHERE session_id IS NOT NULL GROUP BY session_id, actor_id, requested_model"
    )


_STATE_VS_ROWS: Final = f"""
SELECT coalesce(s.requested_model, r.requested_model), s.n, r.n, s.cost, r.cost
FROM (SELECT requested_model, sum(rows) AS n, CAST(sum(cost_usd) AS VARCHAR) AS cost
      FROM state_rollup GROUP BY requested_model) AS s
FULL JOIN (SELECT requested_model, count(*) AS n, CAST(sum(cost_usd) AS VARCHAR) AS cost
           FROM {TABLE_NAME} GROUP BY requested_model) AS r
    ON s.requested_model = r.requested_model
"""


@dataclass(frozen=True, slots=True)
class Difference:
    """One figure that differs: what, for which key, in the ledger and in the copy.

    For the ``state/model`` checks, ``ledger`` is the copy's rows and ``copy``
    its state tables (what the views read).
    """

    check: str
    key: tuple[Any, ...]
    ledger: Any
    copy: Any


@dataclass(frozen=True, slots=True)
class Verification:
    rows_ledger: int
    rows_copy: int
    model_days: int
    sessions: int
    differences: tuple[Difference, ...]

    @property
    def ok(self) -> bool:
        return not self.differences


def _same_cost(a: Any, b: Any, tolerance: Decimal) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(Decimal(str(a)) - Decimal(str(b))) <= tolerance


def _compare(
    check: str,
    names: tuple[str, ...],
    ledger: dict[tuple[Any, ...], tuple[Any, ...]],
    copy: dict[tuple[Any, ...], tuple[Any, ...]],
    cost_tolerance: Decimal,
) -> list[Difference]:
    out: list[Difference] = []
    for key in sorted(ledger.keys() | copy.keys(), key=repr):
        a, b = ledger.get(key), copy.get(key)
        if a is None or b is None:
            out.append(Difference(check, key, a, b))
            continue
        for name, x, y in zip(names, a, b, strict=True):
            same = _same_cost(x, y, cost_tolerance) if name == "cost_usd" else _num(x) == _num(y)
            if not same:
                out.append(Difference(f"{check} {name}", key, x, y))
    return out


def _num(value: Any) -> Any:
    return None if value is None else int(value)


def _keyed(rows: list[tuple[Any, ...]], width: int) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    return {tuple(r[:width]): tuple(r[width:]) for r in rows}


def verify(con: duckdb.DuckDBPyConnection, snap: LedgerSnapshot) -> Verification:
    """Compare the copy in ``con`` with the ledger as ``snap`` sees it."""
    dialect = snap.backend
    tolerance = SQLITE_COST_TOLERANCE if dialect == "sqlite" else Decimal(0)
    (ledger_totals,) = snap.fetch(_totals(dialect))
    (copy_totals,) = con.execute(_totals("duckdb")).fetchall()
    differences = _compare(
        "rows", ("count", "max_id"), {(): ledger_totals}, {(): copy_totals}, tolerance
    )
    figures = ("rows", "input_tokens", "output_tokens", "cache_read_tokens", "cost_usd")
    ledger_days = _keyed(snap.fetch(_per_model_day(dialect)), 2)
    copy_days = _keyed(con.execute(_per_model_day("duckdb")).fetchall(), 2)
    differences += _compare("model/day", figures, ledger_days, copy_days, tolerance)
    ledger_sessions = _keyed(snap.fetch(_per_session()), 3)
    copy_sessions = _keyed(con.execute(_per_session()).fetchall(), 3)
    differences += _compare("session", ("rows",), ledger_sessions, copy_sessions, tolerance)
    state = {(m,): (s_n, s_cost) for m, s_n, _, s_cost, _ in con.execute(_STATE_VS_ROWS).fetchall()}
    rows = {(m,): (r_n, r_cost) for m, _, r_n, _, r_cost in con.execute(_STATE_VS_ROWS).fetchall()}
    # Here "ledger" is the copy's own rows and "copy" its state tables.
    differences += _compare("state/model", ("rows", "cost_usd"), rows, state, Decimal(0))
    return Verification(
        rows_ledger=int(ledger_totals[0]),
        rows_copy=int(copy_totals[0]),
        model_days=len(ledger_days),
        sessions=len(ledger_sessions),
        differences=tuple(differences),
    )
