-- upstream_scorecard, as stored in the analytics file: the same rows and
-- columns as views/upstream_scorecard.sql. Counts and sums come from
-- state_rollup, the latency quantiles from state_latency (served latencies as
-- doubles per upstream number; the p95 from its band, see below), sessions_pinned
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
-- p95 = quantile_cont(latency, 0.95): x(a) + (x(a+1) - x(a)) * d with rn = (n - 1) * 0.95,
-- a = floor(rn) + 1, d = rn - floor(rn) (written as DuckDB interpolates, which may
-- fuse the multiply-add: equal up to the last bit). Ranks read from
-- state_latency_tail (a band of the group's latencies around its p95, below = n -
-- above - m of them under it; see ledger/analytics/latency_tails.py) when x(a) and
-- x(a + 1) are in it, else from every latency.
p95_bounds AS (
    SELECT
        b.*,
        floor(b.rn) + 1 AS a,
        b.below < floor(b.rn) + 1 AND (b.rn = floor(b.rn) OR floor(b.rn) + 2 <= b.below + b.m)
            AS in_tail
    FROM (
        SELECT
            c.gid,
            c.n,
            coalesce(t.m, 0) AS m,
            c.n - c.above - coalesce(t.m, 0) AS below,
            CAST(c.n - 1 AS DOUBLE) * 0.95 AS rn
        FROM state_latency_cuts AS c
        LEFT JOIN (SELECT gid, count(*) AS m FROM state_latency_tail GROUP BY gid) AS t
            USING (gid)
        WHERE c.n > 0
    ) AS b
),
p95_ranked AS (
    SELECT
        b.gid,
        k.latency_ms,
        b.a,
        CASE WHEN b.in_tail THEN b.below ELSE 0 END
            + row_number() OVER (PARTITION BY b.gid ORDER BY k.latency_ms) AS rank
    FROM (
        SELECT gid, latency_ms
        FROM state_latency_tail
        WHERE gid IN (SELECT gid FROM p95_bounds WHERE in_tail)
        UNION ALL
        SELECT gid, latency_ms
        FROM state_latency
        WHERE gid IN (SELECT gid FROM p95_bounds WHERE NOT in_tail)
    ) AS k
    JOIN p95_bounds AS b USING (gid)
),
p95 AS (
    SELECT
        b.gid,
        CASE WHEN x.hi_ms IS NULL OR b.rn = floor(b.rn) THEN x.lo_ms
            ELSE x.lo_ms * (1 - (b.rn - floor(b.rn))) + x.hi_ms * (b.rn - floor(b.rn))
        END AS p95_latency_ms
    FROM (
        SELECT
            gid,
            min(latency_ms) FILTER (WHERE rank = a) AS lo_ms,
            min(latency_ms) FILTER (WHERE rank = a + 1) AS hi_ms
        FROM p95_ranked
        GROUP BY gid
    ) AS x
    JOIN p95_bounds AS b USING (gid)
),
quantiles AS (
    SELECT
        g.requested_model,
        g.upstream,
        q.p50_latency_ms,
        p.p95_latency_ms
    FROM (
        SELECT gid, quantile_cont(latency_ms, 0.5) AS p50_latency_ms
        FROM state_latency
        GROUP BY gid
    ) AS q
    JOIN state_upstreams AS g USING (gid)
    LEFT JOIN p95 AS p USING (gid)
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
