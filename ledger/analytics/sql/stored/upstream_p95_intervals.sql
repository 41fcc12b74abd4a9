-- upstream_p95_intervals, as stored in the analytics file: the same rows and
-- columns as views/upstream_p95_intervals.sql (formulas there), computed over
-- state_latency: served latencies as doubles per upstream number, which
-- partitions and sorts far faster than the rows' strings; deff from upstream_clusters.
CREATE OR REPLACE VIEW upstream_p95_intervals AS
WITH bounds AS (
    SELECT
        q.*,
        z,
        coalesce(c.latency_deff, 1.0) AS deff,
        greatest(1, floor(0.95 * n - z * sqrt(0.95 * 0.05 * n * deff))) AS r,
        least(n, ceil(0.95 * n + z * sqrt(0.95 * 0.05 * n * deff))) AS s
    FROM (
        SELECT gid, count(*) AS n, quantile_disc(latency_ms, 0.9) AS cut
        FROM state_latency
        GROUP BY gid
    ) AS q
    JOIN state_upstreams AS g USING (gid)
    LEFT JOIN upstream_clusters AS c
        ON c.requested_model = g.requested_model AND c.upstream = g.upstream,
    (SELECT ledger_setting('confidence_z') AS z)
),
ranked AS (
    SELECT
        b.gid,
        l.latency_ms,
        b.r,
        b.s,
        b.n - count(*) OVER part + row_number() OVER (part ORDER BY l.latency_ms) AS rank
    FROM state_latency AS l
    JOIN bounds AS b USING (gid)
    WHERE l.latency_ms >= b.cut OR b.r <= 0.9 * b.n + 1
    WINDOW part AS (PARTITION BY b.gid)
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
