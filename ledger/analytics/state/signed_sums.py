"""State tables kept as sums per key, followed by addition and retraction.

A fold notes what changed as signed parts (+ for rows that joined the state, -
for rows that left it, with the values the state held) in a temporary delta
table; :meth:`SignedSums.merge` then rewrites only the groups the delta
touches and drops a group whose count sums to zero. ``state_moves``
(:mod:`ledger.analytics.state.moves`), ``state_decay`` (:mod:`ledger.analytics.state.decay`)
and ``state_call_rollup`` (:mod:`ledger.analytics.state.call_rollup`) are kept this
way: each module holds one :class:`SignedSums`, its table and how a relation of
rows becomes signed parts.
"""

# Every SQL string here is built from our own table and column names: S608 does not apply.
# ruff: noqa: S608
from __future__ import annotations

from dataclasses import dataclass

import duckdb


@dataclass(frozen=True, slots=True)
class SignedSums:
    """``table`` (created by ``ddl``), its groups by ``key``; ``parts``: an ``INSERT INTO``
    :attr:`delta` of the signed sums per key of relation ``{src}``, times ``{sign}``;
    ``sums``: the merged columns after the key, as a SELECT list over the old rows and
    the delta; ``count``: the column whose sum is 0 for an emptied group."""

    table: str
    ddl: str
    key: str
    parts: str
    sums: str
    count: str

    @property
    def delta(self) -> str:
        return f"{self.table}_delta"

    def ensure_table(self, con: duckdb.DuckDBPyConnection) -> None:
        con.execute(self.ddl)

    def add(self, con: duckdb.DuckDBPyConnection, src: str) -> None:
        """Note that the rows of relation ``src`` joined the state the table follows."""
        self._note(con, src, 1)

    def retract(self, con: duckdb.DuckDBPyConnection, src: str) -> None:
        """Note that the rows of relation ``src`` (as the state held them) leave it."""
        self._note(con, src, -1)

    def _note(self, con: duckdb.DuckDBPyConnection, src: str, sign: int) -> None:
        self._ensure_delta(con)
        con.execute(self.parts.format(src=src, sign=sign))

    def merge(self, con: duckdb.DuckDBPyConnection) -> None:
        """Fold the noted parts into ``table``: only the groups they touch are rewritten."""
        self._ensure_delta(con)
        same_key = " AND ".join(f"o.{k} IS NOT DISTINCT FROM d.{k}" for k in self.key.split(", "))
        old = f"{self.table}_old"
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE {old} AS SELECT o.* FROM ("
            f"SELECT rowid AS rid, * FROM {self.table}) AS o "
            f"WHERE EXISTS (SELECT 1 FROM {self.delta} AS d WHERE {same_key})"
        )
        con.execute(f"DELETE FROM {self.table} WHERE rowid IN (SELECT rid FROM {old})")
        con.execute(
            f"INSERT INTO {self.table} SELECT {self.key}, {self.sums} "
            f"FROM (SELECT * EXCLUDE (rid) FROM {old} UNION ALL SELECT * FROM {self.delta}) "
            f"GROUP BY {self.key} HAVING sum({self.count}) <> 0"
        )
        con.execute(f"DROP TABLE {old}")
        con.execute(f"DROP TABLE {self.delta}")

    def _ensure_delta(self, con: duckdb.DuckDBPyConnection) -> None:
        con.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {self.delta} AS SELECT * FROM {self.table} LIMIT 0"
        )
