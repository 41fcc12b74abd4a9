-- upstream_p95_intervals: one row per (requested_model, upstream identity as column
-- upstream) with served latencies. A helper of provider_order_verdict.
--
-- Distribution-free order-statistic interval for the 0.95 quantile of the n
-- served latencies x(1) <= ... <= x(n) (attempts >= 1, status 'ok', not a
-- response-cache hit, latency_ms known); z = ledger_setting('confidence_z'):
--   r = greatest(1, floor(0.95n - z*sqrt(0.95*0.05*n*deff)))
--   s = least(n, ceil(0.95n + z*sqrt(0.95*0.05*n*deff)))
-- where deff is upstream_clusters.latency_deff: latencies of one session are
-- correlated, so the binomial count of values above the p95 varies deff times
-- more than for independent draws (deff = 1 gives the classical interval).
--   p95_low_ms = x(r), p95_high_ms = x(s)
--
-- How (the result is exact, only cheaper than ranking all n values): when
-- r > 0.9n + 1, x(r) and x(s) lie at or above cut = quantile_disc(x, 0.9), so
-- only the values >= cut are ranked, their ranks offset by the n - m values
-- below them (m = how many are ranked). Groups where that does not hold
-- (small n or a large z) rank all their values.
CREATE OR REPLACE VIEW upstream_p95_intervals AS
WITH latencies AS (
    SELECT requested_model, coalesce(upstream, provider) AS upstream, latency_ms
    FROM token_usage
    WHERE attempt >= 1 AND status = 'ok' AND NOT response_cache_hit AND latency_ms IS NOT NULL
),
bounds AS (
    SELECT
        g.*,
        z,
        coalesce(c.latency_deff, 1.0) AS deff,
        greatest(1, floor(0.95 * n - z * sqrt(0.95 * 0.05 * n * deff))) AS r,
        least(n, ceil(0.95 * n + z * sqrt(0.95 * 0.05 * n * deff))) AS s
    FROM (
        SELECT requested_model, upstream, count(*) AS n, quantile_disc(latency_ms, 0.9) AS cut
        FROM latencies
        GROUP BY requested_model, upstream
    ) AS g
    LEFT JOIN (SELECT requested_model, upstream, latency_deff FROM upstream_clusters) AS c
        USING (requested_model, upstream),
    (SELECT ledger_setting('confidence_z') AS z)
),
ranked AS (
    SELECT
        b.requested_model,
        b.upstream,
        l.latency_ms,
        b.r,
        b.s,
        b.n - count(*) OVER part + row_number() OVER (part ORDER BY l.latency_ms) AS rank
    FROM latencies AS l
    JOIN bounds AS b USING (requested_model, upstream)
    WHERE l.latency_ms >= b.cut OR b.r <= 0.9 * b.n + 1
    WINDOW part AS (PARTITION BY b.requested_model, b.upstream)
)
SELECT
    requested_model,
    upstream,
    min(latency_ms) FILTER (WHERE rank >= r) AS p95_low_ms,
    max(latency_ms) FILTER (WHERE rank <= s) AS p95_high_ms
FROM ranked
GROUP BY requested_model, upstream;
