-- upstream_scorecard, as stored in the analytics file: the same rows and
-- columns as views/upstream_scorecard.sql. Counts and sums come from
-- state_rollup, the latency quantiles from state_latency (served latencies as
-- doubles per upstream number; the p50 and p95 from their bands, see below), sessions_pinned
-- from state_sessions (attempt_upstreams: the distinct identities of a session's
-- served attempts).
CREATE OR REPLACE VIEW upstream_scorecard AS
WITH card AS (
    SELECT
        requested_model,
        coalesce(upstream, provider) AS upstream,
        CAST(sum(rows) AS BIGINT) AS attempts,
        CAST(coalesce(sum(rows) FILTER (WHERE status = 'error' AND NOT abandoned), 0) AS BIGINT)
            AS errors,
        CAST(coalesce(sum(rows) FILTER (WHERE served), 0) AS BIGINT) AS served_attempts,
        CAST(coalesce(sum(latency_rows) FILTER (WHERE served), 0) AS BIGINT) AS latency_samples,
        sum(input_tokens) FILTER (WHERE served AND usage_reported) AS served_input_tokens,
        sum(cache_read_tokens) FILTER (WHERE served AND usage_reported)
            AS served_cache_read_tokens,
        sum(cost_usd) AS cost_usd,
        sum(cost_usd) FILTER (WHERE usage_reported) AS costed_cost_usd,
        sum(costed_input_tokens) FILTER (WHERE usage_reported) AS costed_input_tokens
    FROM (
        SELECT *, status = 'ok' AND NOT response_cache_hit AS served
        FROM state_rollup
        WHERE is_attempt
    )
    GROUP BY requested_model, coalesce(upstream, provider)
),
-- p50 and p95 = quantile_cont(latency, q): x(a) + (x(a+1) - x(a)) * d with
-- rn = (n - 1) * q, a = floor(rn) + 1, d = rn - floor(rn) (written as DuckDB
-- interpolates, which may fuse the multiply-add: equal up to the last bit).
-- Ranks read from state_latency_band (per group and q, a band of the group's
-- latencies around its q-quantile, below = n - above - m of them under it; see
-- ledger/analytics/latency_bands.py) when x(a) and x(a + 1) are in it, else
-- from every latency.
band_bounds AS (
    SELECT
        b.*,
        floor(b.rn) + 1 AS a,
        b.below < floor(b.rn) + 1 AND (b.rn = floor(b.rn) OR floor(b.rn) + 2 <= b.below + b.m)
            AS in_band
    FROM (
        SELECT
            c.gid,
            c.q,
            c.n,
            coalesce(t.m, 0) AS m,
            c.n - c.above - coalesce(t.m, 0) AS below,
            CAST(c.n - 1 AS DOUBLE) * c.q AS rn
        FROM state_latency_cuts AS c
        LEFT JOIN (SELECT gid, q, count(*) AS m FROM state_latency_band GROUP BY gid, q) AS t
            USING (gid, q)
        WHERE c.n > 0
    ) AS b
),
band_ranked AS (
    SELECT
        b.gid,
        b.q,
        k.latency_ms,
        b.a,
        CASE WHEN b.in_band THEN b.below ELSE 0 END
            + row_number() OVER (PARTITION BY b.gid, b.q ORDER BY k.latency_ms) AS rank
    FROM (
        SELECT l.gid, l.q, l.latency_ms
        FROM state_latency_band AS l
        JOIN band_bounds AS i ON i.gid = l.gid AND i.q = l.q
        WHERE i.in_band
        UNION ALL
        SELECT l.gid, o.q, l.latency_ms
        FROM state_latency AS l
        JOIN band_bounds AS o ON o.gid = l.gid
        WHERE NOT o.in_band
    ) AS k
    JOIN band_bounds AS b ON b.gid = k.gid AND b.q = k.q
),
band_quantiles AS (
    SELECT
        b.gid,
        b.q,
        CASE WHEN x.hi_ms IS NULL OR b.rn = floor(b.rn) THEN x.lo_ms
            ELSE x.lo_ms * (1 - (b.rn - floor(b.rn))) + x.hi_ms * (b.rn - floor(b.rn))
        END AS latency_ms
    FROM (
        SELECT
            gid,
            q,
            min(latency_ms) FILTER (WHERE rank = a) AS lo_ms,
            min(latency_ms) FILTER (WHERE rank = a + 1) AS hi_ms
        FROM band_ranked
        GROUP BY gid, q
    ) AS x
    JOIN band_bounds AS b ON b.gid = x.gid AND b.q = x.q
),
quantiles AS (
    SELECT
        g.requested_model,
        g.upstream,
        q.p50_latency_ms,
        q.p95_latency_ms
    FROM (
        SELECT
            gid,
            max(latency_ms) FILTER (WHERE q = 0.5) AS p50_latency_ms,
            max(latency_ms) FILTER (WHERE q = 0.95) AS p95_latency_ms
        FROM band_quantiles
        GROUP BY gid
    ) AS q
    JOIN state_upstreams AS g USING (gid)
),
pinned AS (
    SELECT requested_model, attempt_upstreams[1] AS upstream, count(*) AS sessions_pinned
    FROM state_sessions
    WHERE array_length(attempt_upstreams) = 1
    GROUP BY requested_model, attempt_upstreams[1]
)
SELECT
    c.requested_model,
    c.upstream,
    c.attempts,
    c.errors,
    CAST(c.errors AS DOUBLE) / c.attempts AS error_rate,
    c.served_attempts,
    c.latency_samples,
    q.p50_latency_ms,
    q.p95_latency_ms,
    CAST(c.served_cache_read_tokens AS DOUBLE) / nullif(c.served_input_tokens, 0)
        AS token_hit_rate,
    c.cost_usd,
    CAST(c.costed_cost_usd AS DOUBLE) * 1e6 / nullif(c.costed_input_tokens, 0)
        AS cost_per_mtok_input,
    coalesce(p.sessions_pinned, 0) AS sessions_pinned
FROM card AS c
LEFT JOIN quantiles AS q USING (requested_model, upstream)
LEFT JOIN pinned AS p USING (requested_model, upstream);
