"""The top of each upstream's latencies, kept apart so the p95 reads a tenth of them.

``provider_order_verdict`` needs, per (requested_model, upstream) group of
``n`` served latencies, the p95 (``quantile_cont``: order statistics near rank
0.95n) and its order-statistic interval ``x(r)``, ``x(s)`` with ``r`` a few
standard deviations below 0.95n. All of them lie in the top few percent, yet
ranking them read every latency of the group: at 10M rows that is most of the
verdict's time, and it grows with the rows.

This module keeps, beside ``state_latency`` (every served latency, still what
the p50 and the fallbacks read):

``state_latency_cuts``
    per group number ``gid``: ``n`` (its latencies in ``state_latency``),
    ``cut`` (NULL: the tail holds every latency of the group) and ``recut_n``
    (``n`` when the cut was last chosen).
``state_latency_tail``
    every latency of the group ``>= cut`` (ties at the cut included), with its
    row id.

Invariant: the tail holds exactly the group's latencies ``>= cut``, so the
``m`` it holds are the group's top ``m`` and the ``i``-th of them (ascending)
has rank ``n - m + i`` among all ``n``: ranks read from the tail are exact.
A view reads the tail only when every rank it needs is ``> n - m``, and the
whole group otherwise (``sql/stored/upstream_p95_intervals.sql``), so the
results never depend on how well the cut was chosen, only the speed does.

The cut is chosen at sync (:func:`recut`): ``quantile_disc(latency, 1 -
KEEP_SHARE)`` once a group has MIN_ROWS latencies, chosen again when the tail
falls below RECUT_SHARE of the group (the p95 interval needs a bit over 5 %
of it) or, after the group has doubled, exceeds REGROW_SHARE (latencies that
drift up). A group below MIN_ROWS keeps everything: reading it is cheap.
"""

# Every SQL string here is a module constant over our own tables: S608 does not apply.
# ruff: noqa: S608
from __future__ import annotations

from typing import Final

import duckdb

CUTS: Final = "state_latency_cuts"
TAIL: Final = "state_latency_tail"
TABLES: Final = (CUTS, TAIL)

#: Share of a group's latencies a fresh cut keeps.
KEEP_SHARE: Final = 0.10
#: A tail below this share of its group is cut again (the p95 interval needs > 5 %).
RECUT_SHARE: Final = 0.07
#: A tail above this share is cut again once its group has doubled since its last cut.
REGROW_SHARE: Final = 0.30
#: Groups smaller than this keep every latency in the tail.
MIN_ROWS: Final = 2_000

DDL: Final = (
    f"CREATE TABLE IF NOT EXISTS {CUTS} "
    "(gid INTEGER NOT NULL, n BIGINT NOT NULL, cut DOUBLE, recut_n BIGINT NOT NULL)",
    f"CREATE TABLE IF NOT EXISTS {TAIL} "
    "(gid INTEGER NOT NULL, latency_ms DOUBLE NOT NULL, id BIGINT NOT NULL)",
)

_NEW_GROUPS: Final = f"""
INSERT INTO {CUTS}
SELECT DISTINCT gid, 0, NULL, 0 FROM {{src}}
WHERE gid NOT IN (SELECT gid FROM {CUTS})
"""
# {sign}: 1 for latencies added to state_latency, -1 for latencies removed from it.
_COUNT: Final = f"""
UPDATE {CUTS} SET n = {CUTS}.n + {{sign}} * d.k
FROM (SELECT gid, count(*) AS k FROM {{src}} GROUP BY gid) AS d
WHERE {CUTS}.gid = d.gid
"""
# A group without a cut that has grown past MIN_ROWS is about to be cut: not copied twice.
_ADD_TAIL: Final = f"""
INSERT INTO {TAIL}
SELECT l.gid, l.latency_ms, l.id
FROM {{src}} AS l
JOIN {CUTS} AS c USING (gid)
WHERE CASE WHEN c.cut IS NULL THEN c.n < {MIN_ROWS} ELSE l.latency_ms >= c.cut END
"""
_DUE: Final = f"""
CREATE OR REPLACE TEMP TABLE state_latency_due AS
SELECT c.gid
FROM {CUTS} AS c
LEFT JOIN (SELECT gid, count(*) AS m FROM {TAIL} GROUP BY gid) AS t USING (gid)
WHERE CASE
    WHEN c.n < {MIN_ROWS} THEN c.cut IS NOT NULL
    WHEN c.cut IS NULL THEN true
    ELSE coalesce(t.m, 0) < {RECUT_SHARE} * c.n
        OR (t.m > {REGROW_SHARE} * c.n AND c.n >= 2 * c.recut_n)
END
"""
_SET_CUTS: Final = f"""
UPDATE {CUTS} SET cut = q.cut, recut_n = {CUTS}.n
FROM (
    SELECT d.gid, CASE WHEN c.n >= {MIN_ROWS} THEN l.cut END AS cut
    FROM state_latency_due AS d
    JOIN {CUTS} AS c USING (gid)
    LEFT JOIN (
        SELECT gid, quantile_disc(latency_ms, {1 - KEEP_SHARE}) AS cut
        FROM state_latency
        WHERE gid IN (SELECT gid FROM state_latency_due)
        GROUP BY gid
    ) AS l USING (gid)
) AS q
WHERE {CUTS}.gid = q.gid
"""
_REFILL: Final = f"""
INSERT INTO {TAIL}
SELECT l.gid, l.latency_ms, l.id
FROM state_latency AS l
JOIN {CUTS} AS c USING (gid)
WHERE l.gid IN (SELECT gid FROM state_latency_due) AND (c.cut IS NULL OR l.latency_ms >= c.cut)
"""


def ensure_tables(con: duckdb.DuckDBPyConnection) -> None:
    for ddl in DDL:
        con.execute(ddl)


def add(con: duckdb.DuckDBPyConnection, src: str) -> None:
    """Count and keep latencies ``src`` (gid, latency_ms, id) just added to ``state_latency``,
    then cut again the groups that need it."""
    con.execute(_NEW_GROUPS.format(src=src))
    con.execute(_COUNT.format(src=src, sign=1))
    con.execute(_ADD_TAIL.format(src=src))
    recut(con)


def remove(con: duckdb.DuckDBPyConnection, src: str) -> None:
    """Forget latencies ``src`` (gid, latency_ms, id) just removed from ``state_latency``;
    :func:`add` (which every fold of changes calls after) cuts again where needed."""
    con.execute(f"DELETE FROM {TAIL} WHERE id IN (SELECT id FROM {src})")
    con.execute(_COUNT.format(src=src, sign=-1))


def recut(con: duckdb.DuckDBPyConnection) -> None:
    """Choose the cut again for the groups whose tail is too small or too large
    (or too small a group to need one), and refill their tails from ``state_latency``."""
    con.execute(_DUE)
    due = con.execute("SELECT count(*) FROM state_latency_due").fetchall()[0][0]
    if due:
        con.execute(_SET_CUTS)
        con.execute(f"DELETE FROM {TAIL} WHERE gid IN (SELECT gid FROM state_latency_due)")
        con.execute(_REFILL)
    con.execute("DROP TABLE state_latency_due")
