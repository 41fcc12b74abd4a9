"""A band of each upstream's latencies around its p95, kept apart so the verdict reads ~1 %.

``provider_order_verdict`` needs, per (requested_model, upstream) group of
``n`` served latencies, the p95 (``quantile_cont``: order statistics ``a``,
``a + 1`` near rank 0.95n) and its order-statistic interval ``x(r)``,
``x(s)``, ``r`` and ``s`` a few standard deviations (widened by the design
effect) either side of 0.95n. Ranking them read every latency of the group:
at 10M rows most of the verdict's time, growing with the rows.

This module keeps, beside ``state_latency`` (every served latency, still what
the p50 and the fallbacks read):

``state_latency_cuts``
    per group number ``gid``: ``n`` (its latencies in ``state_latency``), the
    band's edges ``low`` and ``high`` (``low`` NULL: the band holds every
    latency; ``high`` NULL: no upper edge), ``above`` (how many latencies are
    ``> high``) and ``recut_n`` (``n`` when the edges were last chosen).
``state_latency_tail``
    every latency of the group in ``[low, high]`` (ties at the edges
    included), with its row id: the band.

Invariant: the band holds exactly the group's ``m`` latencies in ``[low,
high]`` and ``above`` counts those above, so the ``i``-th of the band
(ascending) has rank ``below + i`` among all ``n``, ``below = n - above - m``:
ranks read from the band are exact. A view reads the band only when every
rank it needs lies in ``(below, below + m]``, and the group's every latency
otherwise (``sql/stored/upstream_p95_intervals.sql``, the p95 of
``sql/stored/upstream_scorecard.sql``), so the results never depend on how
well the edges were chosen, only the speed does.

The edges are chosen at sync (:func:`recut`) once a group has MIN_ROWS
latencies: 0.95 +- w of it, w = max(MIN_HALF_WIDTH, SPREAD * sqrt(0.95 *
0.05 * DEFF_ALLOWED / n)) rounded out to a grid of fractions, so the band
holds about 2w of the group (w shrinks as the group grows: the band grows as
sqrt(n)). They are chosen again when the group has doubled, or when its p95
rank has come within w/4 of an edge (latencies that drift). A group below
MIN_ROWS keeps everything: reading it is cheap.
"""

# Every SQL string here is a module constant over our own tables: S608 does not apply.
# ruff: noqa: S608
from __future__ import annotations

from typing import Final

import duckdb

CUTS: Final = "state_latency_cuts"
TAIL: Final = "state_latency_tail"
TABLES: Final = (CUTS, TAIL)

#: Groups smaller than this keep every latency (no cut): reading them is cheap.
MIN_ROWS: Final = 2_000
#: The band a cut keeps is 0.95 +- w of the group, w = max(MIN_HALF_WIDTH,
#: SPREAD * sqrt(0.95 * 0.05 * DEFF_ALLOWED / n)): room for the p95 interval's
#: ranks at a z of SPREAD / sqrt(DEFF_ALLOWED / deff), and for drift until the next cut.
MIN_HALF_WIDTH: Final = 0.0025
SPREAD: Final = 4.0
DEFF_ALLOWED: Final = 10.0

DDL: Final = (
    f"CREATE TABLE IF NOT EXISTS {CUTS} (gid INTEGER NOT NULL, n BIGINT NOT NULL, "
    "above BIGINT NOT NULL, low DOUBLE, high DOUBLE, recut_n BIGINT NOT NULL)",
    f"CREATE TABLE IF NOT EXISTS {TAIL} "
    "(gid INTEGER NOT NULL, latency_ms DOUBLE NOT NULL, id BIGINT NOT NULL)",
)

_NEW_GROUPS: Final = f"""
INSERT INTO {CUTS}
SELECT DISTINCT gid, 0, 0, NULL, NULL, 0 FROM {{src}}
WHERE gid NOT IN (SELECT gid FROM {CUTS})
"""
# {sign}: 1 for latencies added to state_latency, -1 for latencies removed from it.
_COUNT: Final = f"""
UPDATE {CUTS} SET n = {CUTS}.n + {{sign}} * d.k, above = {CUTS}.above + {{sign}} * d.a
FROM (
    SELECT l.gid, count(*) AS k, count(*) FILTER (WHERE l.latency_ms > c.high) AS a
    FROM {{src}} AS l
    JOIN {CUTS} AS c USING (gid)
    GROUP BY l.gid
) AS d
WHERE {CUTS}.gid = d.gid
"""
_IN_BAND: Final = (
    "CASE WHEN c.low IS NULL THEN {uncut} "
    "ELSE l.latency_ms >= c.low AND (c.high IS NULL OR l.latency_ms <= c.high) END"
)
# A group without a cut that has grown past MIN_ROWS is about to be cut: not copied twice.
_ADD_TAIL: Final = f"""
INSERT INTO {TAIL}
SELECT l.gid, l.latency_ms, l.id
FROM {{src}} AS l
JOIN {CUTS} AS c USING (gid)
WHERE {_IN_BAND.format(uncut=f"c.n < {MIN_ROWS}")}
"""
# Due: a group crossing MIN_ROWS either way, one twice as large as at its last cut
# (its band may narrow), or one whose p95 rank a has come within a quarter of the
# band's half width of either edge (the latencies drifted).
_DUE: Final = f"""
CREATE OR REPLACE TEMP TABLE state_latency_due AS
SELECT gid
FROM (
    SELECT
        c.*,
        c.n - c.above - coalesce(t.m, 0) AS below,
        coalesce(t.m, 0) AS m,
        floor(0.95 * (c.n - 1)) + 1 AS a,
        greatest({MIN_HALF_WIDTH},
            {SPREAD} * sqrt(0.95 * 0.05 * {DEFF_ALLOWED} / nullif(c.recut_n, 0)))
            * c.recut_n / 4 AS margin
    FROM {CUTS} AS c
    LEFT JOIN (SELECT gid, count(*) AS m FROM {TAIL} GROUP BY gid) AS t USING (gid)
)
WHERE CASE
    WHEN n < {MIN_ROWS} THEN low IS NOT NULL
    WHEN low IS NULL THEN true
    ELSE n >= 2 * recut_n OR a - below < margin
        OR (high IS NOT NULL AND below + m - (a + 1) < margin)
END
"""
#: Fractions the band's edges are rounded out to: one quantile_disc over a constant
#: list (selection, not a sort of the group; quantile_disc takes no per-group fraction).
_GRID_STEP: Final = 0.0025
_GRID_FIRST: Final = 0.8
_GRID: Final = tuple(round(_GRID_FIRST + _GRID_STEP * i, 4) for i in range(81))
# low: the grid's largest fraction <= 0.95 - w; high: its smallest >= 0.95 + w, none
# when w >= 0.05 (the band reaches the top).
_SET_CUTS: Final = f"""
UPDATE {CUTS} SET low = q.low, high = q.high, above = 0, recut_n = {CUTS}.n
FROM (
    SELECT
        gid,
        qs[greatest(1, CAST(floor((0.95 - half - {_GRID_FIRST}) / {_GRID_STEP}) AS BIGINT) + 1)]
            AS low,
        CASE WHEN half < 0.05 THEN
            qs[least({len(_GRID)},
                CAST(ceil((0.95 + half - {_GRID_FIRST}) / {_GRID_STEP}) AS BIGINT) + 1)]
        END AS high
    FROM (
        SELECT
            w.gid,
            any_value(w.half) AS half,
            quantile_disc(l.latency_ms, {list(_GRID)}) AS qs
        FROM (
            SELECT gid,
                greatest({MIN_HALF_WIDTH}, {SPREAD} * sqrt(0.95 * 0.05 * {DEFF_ALLOWED} / n))
                    AS half
            FROM {CUTS}
            WHERE gid IN (SELECT gid FROM state_latency_due) AND n >= {MIN_ROWS}
        ) AS w
        JOIN state_latency AS l USING (gid)
        GROUP BY w.gid
    )
    UNION ALL
    SELECT gid, NULL, NULL
    FROM {CUTS}
    WHERE gid IN (SELECT gid FROM state_latency_due) AND n < {MIN_ROWS}
) AS q
WHERE {CUTS}.gid = q.gid
"""
_SET_ABOVE: Final = f"""
UPDATE {CUTS} SET above = q.above
FROM (
    SELECT l.gid, count(*) AS above
    FROM state_latency AS l
    JOIN {CUTS} AS c USING (gid)
    WHERE l.gid IN (SELECT gid FROM state_latency_due) AND l.latency_ms > c.high
    GROUP BY l.gid
) AS q
WHERE {CUTS}.gid = q.gid
"""
_REFILL: Final = f"""
INSERT INTO {TAIL}
SELECT l.gid, l.latency_ms, l.id
FROM state_latency AS l
JOIN {CUTS} AS c USING (gid)
WHERE l.gid IN (SELECT gid FROM state_latency_due) AND {_IN_BAND.format(uncut="true")}
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
        con.execute(_SET_ABOVE)
        con.execute(f"DELETE FROM {TAIL} WHERE gid IN (SELECT gid FROM state_latency_due)")
        con.execute(_REFILL)
    con.execute("DROP TABLE state_latency_due")
