-- The stored upstream_scorecard and upstream_p95_intervals before the kept latency
-- tails (commit fae392a): the baseline bench/bench_verdict.py times the verdict over.
-- upstream_scorecard, as stored in the analytics file: the same rows and
-- columns as views/upstream_scorecard.sql. Counts and sums come from
-- state_rollup, the latency quantiles from state_latency (served latencies as
-- doubles per upstream number), sessions_pinned from state_sessions
-- (attempt_upstreams: the distinct identities of a session's served attempts).
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
quantiles AS (
    SELECT
        g.requested_model,
        g.upstream,
        q.p50_latency_ms,
        q.p95_latency_ms
    FROM (
        SELECT
            gid,
            quantile_cont(latency_ms, 0.5) AS p50_latency_ms,
            quantile_cont(latency_ms, 0.95) AS p95_latency_ms
        FROM state_latency
        GROUP BY gid
    ) AS q
    JOIN state_upstreams AS g USING (gid)
),
pinned AS (
    SELECT requested_model, attempt_upstreams[1] AS upstream, count(*) AS sessions_pinned
    FROM state_sessions
    WHERE len(attempt_upstreams) = 1
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
