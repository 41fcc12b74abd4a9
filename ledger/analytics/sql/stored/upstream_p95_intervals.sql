-- upstream_p95_intervals, as stored in the analytics file: the same rows and
-- columns as views/upstream_p95_intervals.sql (formulas there), computed over
-- state_latency_band (q = 0.95): per upstream number, a band of its latencies
-- around the p95 chosen at sync, with n (all its latencies) and above (those
-- above the band) in state_latency_cuts (see ledger/analytics/latency_bands.py); deff
-- from upstream_clusters.
--
-- The band holds exactly the group's m latencies in [low, high], so its i-th
-- smallest has rank below + i among all n, below = n - above - m. When x(r)
-- and x(s) have ranks in (below, below + m], only the band is ranked;
-- otherwise (a large z or deff, latencies drifted since the last sync's cut)
-- the group's every latency is ranked from state_latency, as the row view
-- does. The result is exact either way.
CREATE OR REPLACE VIEW upstream_p95_intervals AS
WITH bounds AS (
    SELECT b.*, b.below < b.r AND b.s <= b.below + b.m AS in_band
    FROM (
        SELECT
            c.gid,
            c.n,
            coalesce(t.m, 0) AS m,
            c.n - c.above - coalesce(t.m, 0) AS below,
            greatest(1, floor(0.95 * c.n - z * sqrt(0.95 * 0.05 * c.n * deff))) AS r,
            least(c.n, ceil(0.95 * c.n + z * sqrt(0.95 * 0.05 * c.n * deff))) AS s
        FROM (
            SELECT c.*, coalesce(u.latency_deff, 1.0) AS deff
            FROM state_latency_cuts AS c
            JOIN state_upstreams AS g USING (gid)
            LEFT JOIN upstream_clusters AS u
                ON u.requested_model = g.requested_model AND u.upstream = g.upstream
            WHERE c.n > 0 AND c.q = 0.95
        ) AS c
        LEFT JOIN (
            SELECT gid, count(*) AS m FROM state_latency_band WHERE q = 0.95 GROUP BY gid
        ) AS t
            USING (gid),
        (SELECT ledger_setting('confidence_z') AS z)
    ) AS b
),
kept AS (
    SELECT gid, latency_ms
    FROM state_latency_band
    WHERE q = 0.95 AND gid IN (SELECT gid FROM bounds WHERE in_band)
    UNION ALL
    SELECT gid, latency_ms
    FROM state_latency
    WHERE gid IN (SELECT gid FROM bounds WHERE NOT in_band)
),
ranked AS (
    SELECT
        b.gid,
        k.latency_ms,
        b.r,
        b.s,
        CASE WHEN b.in_band THEN b.below ELSE 0 END
            + row_number() OVER (PARTITION BY b.gid ORDER BY k.latency_ms) AS rank
    FROM kept AS k
    JOIN bounds AS b USING (gid)
)
SELECT
    g.requested_model,
    g.upstream,
    i.p95_low_ms,
    i.p95_high_ms
FROM (
    SELECT
        gid,
        min(latency_ms) FILTER (WHERE rank >= r) AS p95_low_ms,
        max(latency_ms) FILTER (WHERE rank <= s) AS p95_high_ms
    FROM ranked
    GROUP BY gid
) AS i
JOIN state_upstreams AS g USING (gid);
