"""Bands of each upstream's latencies around its p50 and its p95, kept apart so views read ~1 %.

``upstream_scorecard`` needs, per (requested_model, upstream) group of ``n``
served latencies, its p50 and p95 (``quantile_cont``: order statistics ``a``,
``a + 1`` near rank q·n), and ``provider_order_verdict`` the p95's
order-statistic interval ``x(r)``, ``x(s)``, ``r`` and ``s`` a few standard
deviations (widened by the design effect) either side of 0.95n. Ranking them
read every latency of the group: at 100M rows seconds per view, growing with
the rows.

This module keeps, beside ``state_latency`` (every served latency, what the
views fall back to), one band per group and quantile ``q`` in QUANTILES:

``state_latency_cuts``
    per group number ``gid`` and ``q``: ``n`` (the group's latencies in
    ``state_latency``), the band's edges ``low`` and ``high`` (``low`` NULL:
    the band holds every latency; ``high`` NULL: no upper edge), ``above`` (how
    many latencies are ``> high``) and ``recut_n`` (``n`` when the edges were
    last chosen).
``state_latency_band``
    every latency of the group in ``[low, high]`` (ties at the edges
    included), with its ``q`` and row id: the band.

Invariant: a band holds exactly the group's ``m`` latencies in ``[low, high]``
and ``above`` counts those above, so the ``i``-th of the band (ascending) has
rank ``below + i`` among all ``n``, ``below = n - above - m``: ranks read from
the band are exact. A view reads the band only when every rank it needs lies
in ``(below, below + m]``, and the group's every latency otherwise
(``sql/stored/upstream_scorecard.sql``, ``sql/stored/upstream_p95_intervals.sql``),
so the results never depend on how well the edges were chosen, only the
speed does.

The edges are chosen at sync (:func:`recut`) once a group has MIN_ROWS
latencies: q +- w of it, w = max(MIN_HALF_WIDTH, SPREAD * sqrt(q (1 - q) *
DEFF_ALLOWED / n)) rounded out to a grid of fractions, so the band holds about
2w of the group (w shrinks as the group grows: the band grows as sqrt(n)).
They are chosen again when the group has doubled, or when its rank a has come
within w/4 of an edge (latencies that drift). A group below MIN_ROWS keeps
everything: reading it is cheap.
"""

# Every SQL string here is a module constant over our own tables: S608 does not apply.
# ruff: noqa: S608
from __future__ import annotations

from typing import Final

import duckdb

CUTS: Final = "state_latency_cuts"
BAND: Final = "state_latency_band"
TABLES: Final = (CUTS, BAND)

#: The quantiles a band is kept around: the scorecard's p50 and p95 (and the p95's interval).
QUANTILES: Final = (0.5, 0.95)
#: Groups smaller than this keep every latency (no cut): reading them is cheap.
MIN_ROWS: Final = 2_000
#: The band a cut keeps is q +- w of the group, w = max(MIN_HALF_WIDTH,
#: SPREAD * sqrt(q (1 - q) * DEFF_ALLOWED / n)): room for the p95 interval's
#: ranks at a z of SPREAD / sqrt(DEFF_ALLOWED / deff), and for drift until the next cut.
MIN_HALF_WIDTH: Final = 0.0025
SPREAD: Final = 4.0
DEFF_ALLOWED: Final = 10.0

DDL: Final = (
    f"CREATE TABLE IF NOT EXISTS {CUTS} (gid INTEGER NOT NULL, q DOUBLE NOT NULL, "
    "n BIGINT NOT NULL, above BIGINT NOT NULL, low DOUBLE, high DOUBLE, "
    "recut_n BIGINT NOT NULL)",
    f"CREATE TABLE IF NOT EXISTS {BAND} "
    "(gid INTEGER NOT NULL, q DOUBLE NOT NULL, latency_ms DOUBLE NOT NULL, id BIGINT NOT NULL)",
)


def _half(q: str, n: str) -> str:
    """SQL for the band's half width w at quantile ``q`` for ``n`` latencies."""
    return (
        f"greatest({MIN_HALF_WIDTH}, "
        f"{SPREAD} * sqrt({q} * (1 - {q}) * {DEFF_ALLOWED} / nullif({n}, 0)))"
    )


_QUANTILE_ROWS: Final = ", ".join(f"(CAST({q!r} AS DOUBLE))" for q in QUANTILES)
_NEW_GROUPS: Final = f"""
INSERT INTO {CUTS}
SELECT g.gid, k.q, 0, 0, NULL, NULL, 0
FROM (SELECT DISTINCT gid FROM {{src}}) AS g, (VALUES {_QUANTILE_ROWS}) AS k(q)
WHERE g.gid NOT IN (SELECT gid FROM {CUTS})
"""
# {sign}: 1 for latencies added to state_latency, -1 for latencies removed from it.
_COUNT: Final = f"""
UPDATE {CUTS} SET n = {CUTS}.n + {{sign}} * d.k, above = {CUTS}.above + {{sign}} * d.a
FROM (
    SELECT l.gid, c.q, count(*) AS k, count(*) FILTER (WHERE l.latency_ms > c.high) AS a
    FROM {{src}} AS l
    JOIN {CUTS} AS c USING (gid)
    GROUP BY l.gid, c.q
) AS d
WHERE {CUTS}.gid = d.gid AND {CUTS}.q = d.q
"""
_IN_BAND: Final = (
    "CASE WHEN c.low IS NULL THEN {uncut} "
    "ELSE l.latency_ms >= c.low AND (c.high IS NULL OR l.latency_ms <= c.high) END"
)
# A group without a cut that has grown past MIN_ROWS is about to be cut: not copied twice.
_ADD_BAND: Final = f"""
INSERT INTO {BAND}
SELECT l.gid, c.q, l.latency_ms, l.id
FROM {{src}} AS l
JOIN {CUTS} AS c USING (gid)
WHERE {_IN_BAND.format(uncut=f"c.n < {MIN_ROWS}")}
"""
# Due: a band whose group crosses MIN_ROWS either way, one twice as large as at its
# last cut (its band may narrow), or one whose rank a has come within a quarter of
# the band's half width of either edge (the latencies drifted).
_DUE: Final = f"""
CREATE OR REPLACE TEMP TABLE state_latency_due AS
SELECT gid, q
FROM (
    SELECT
        c.*,
        c.n - c.above - coalesce(t.m, 0) AS below,
        coalesce(t.m, 0) AS m,
        floor(c.q * (c.n - 1)) + 1 AS a,
        {_half("c.q", "c.recut_n")} * c.recut_n / 4 AS margin
    FROM {CUTS} AS c
    LEFT JOIN (SELECT gid, q, count(*) AS m FROM {BAND} GROUP BY gid, q) AS t USING (gid, q)
)
WHERE CASE
    WHEN n < {MIN_ROWS} THEN low IS NOT NULL
    WHEN low IS NULL THEN true
    ELSE n >= 2 * recut_n OR a - below < margin
        OR (high IS NOT NULL AND below + m - (a + 1) < margin)
END
"""
#: Fractions the band's edges are rounded out to, q - GRID_REACH .. q + GRID_REACH
#: within [0, 1]: one quantile_disc over a constant list (selection, not a sort of
#: the group; quantile_disc takes no per-group fraction).
_GRID_STEP: Final = 0.0025
_GRID_REACH: Final = 0.15


def _grid(q: float) -> tuple[float, ...]:
    first, last = max(0.0, q - _GRID_REACH), min(1.0, q + _GRID_REACH)
    return tuple(
        round(first + _GRID_STEP * i, 4) for i in range(round((last - first) / _GRID_STEP) + 1)
    )


def _set_cuts(q: float) -> str:
    """The edges of the due bands at ``q``: low the grid's largest fraction <= q - w, high
    its smallest >= q + w, none when w >= 1 - q (the band reaches the top)."""
    grid = _grid(q)
    return f"""
UPDATE {CUTS} SET low = e.low, high = e.high, above = 0, recut_n = {CUTS}.n
FROM (
    SELECT
        gid,
        qs[greatest(1, CAST(floor(({q} - half - {grid[0]}) / {_GRID_STEP}) AS BIGINT) + 1)]
            AS low,
        CASE WHEN half < 1 - {q} THEN
            qs[least({len(grid)},
                CAST(ceil(({q} + half - {grid[0]}) / {_GRID_STEP}) AS BIGINT) + 1)]
        END AS high
    FROM (
        SELECT
            w.gid,
            any_value(w.half) AS half,
            quantile_disc(l.latency_ms, {list(grid)}) AS qs
        FROM (
            SELECT gid, {_half(repr(q), "n")} AS half
            FROM {CUTS}
            WHERE q = {q} AND n >= {MIN_ROWS}
                AND gid IN (SELECT gid FROM state_latency_due WHERE q = {q})
        ) AS w
        JOIN state_latency AS l USING (gid)
        GROUP BY w.gid
    )
    UNION ALL
    SELECT gid, NULL, NULL
    FROM {CUTS}
    WHERE q = {q} AND n < {MIN_ROWS} AND gid IN (SELECT gid FROM state_latency_due WHERE q = {q})
) AS e
WHERE {CUTS}.gid = e.gid AND {CUTS}.q = {q}
"""


_SET_CUTS: Final = tuple(_set_cuts(q) for q in QUANTILES)
_SET_ABOVE: Final = f"""
UPDATE {CUTS} SET above = e.above
FROM (
    SELECT l.gid, c.q, count(*) AS above
    FROM state_latency AS l
    JOIN {CUTS} AS c USING (gid)
    JOIN state_latency_due AS d ON d.gid = c.gid AND d.q = c.q
    WHERE l.latency_ms > c.high
    GROUP BY l.gid, c.q
) AS e
WHERE {CUTS}.gid = e.gid AND {CUTS}.q = e.q
"""
_CLEAR_DUE: Final = f"""
DELETE FROM {BAND}
WHERE EXISTS (SELECT 1 FROM state_latency_due AS d WHERE d.gid = {BAND}.gid AND d.q = {BAND}.q)
"""
_REFILL: Final = f"""
INSERT INTO {BAND}
SELECT l.gid, c.q, l.latency_ms, l.id
FROM state_latency AS l
JOIN {CUTS} AS c USING (gid)
JOIN state_latency_due AS d ON d.gid = c.gid AND d.q = c.q
WHERE {_IN_BAND.format(uncut="true")}
"""


def ensure_tables(con: duckdb.DuckDBPyConnection) -> None:
    for ddl in DDL:
        con.execute(ddl)


def add(con: duckdb.DuckDBPyConnection, src: str) -> None:
    """Count and keep latencies ``src`` (gid, latency_ms, id) just added to ``state_latency``,
    then cut again the bands that need it."""
    con.execute(_NEW_GROUPS.format(src=src))
    con.execute(_COUNT.format(src=src, sign=1))
    con.execute(_ADD_BAND.format(src=src))
    recut(con)


def remove(con: duckdb.DuckDBPyConnection, src: str) -> None:
    """Forget latencies ``src`` (gid, latency_ms, id) just removed from ``state_latency``;
    :func:`add` (which every fold of changes calls after) cuts again where needed."""
    con.execute(f"DELETE FROM {BAND} WHERE id IN (SELECT id FROM {src})")
    con.execute(_COUNT.format(src=src, sign=-1))


def recut(con: duckdb.DuckDBPyConnection) -> None:
    """Choose the cut again for the bands too small or too large (or of too small a group
    to need one), and refill them from ``state_latency``."""
    con.execute(_DUE)
    due = con.execute("SELECT count(*) FROM state_latency_due").fetchall()[0][0]
    if due:
        for set_cuts in _SET_CUTS:
            con.execute(set_cuts)
        con.execute(_SET_ABOVE)
        con.execute(_CLEAR_DUE)
        con.execute(_REFILL)
    con.execute("DROP TABLE state_latency_due")
