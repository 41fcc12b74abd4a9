-- upstream_scorecard: one row per (requested_model, upstream identity as column
-- upstream), over attempts (rows with attempt >= 1; response-cache hits excluded).
--
--   attempts            = rows with attempt >= 1
--   errors              = those with status = 'error', except 'abandoned' ones (the
--                         caller stopped reading a stream the upstream was serving:
--                         not the upstream's failure)
--   error_rate          = errors / attempts
--   served_attempts     = status = 'ok' AND NOT response_cache_hit
--   latency_samples     = served attempts with a latency_ms
--   p50_latency_ms,
--   p95_latency_ms      = quantile_cont (linear interpolation, as numpy/pandas)
--                         of latency_ms over served attempts
--   token_hit_rate      = sum(cache_read_tokens) / sum(input_tokens), served attempts
--                         whose usage was reported
--   cost_per_mtok_input = 1e6 * sum(cost_usd) / sum(input_tokens) over attempts whose
--                         cost is known and usage reported (failed attempts' spend
--                         included): the *effective* price, after what the prompt
--                         cache saved. Unknown costs and unreported usage are left
--                         out of both sums, never taken as 0.
--   sessions_pinned     = sessions (session_id, actor_id, requested_model) whose
--                         served attempts all went to this upstream
CREATE OR REPLACE VIEW upstream_scorecard AS
WITH attempts AS (
    SELECT
        session_id,
        actor_id,
        requested_model,
        coalesce(upstream, provider) AS upstream,
        status = 'ok' AND NOT response_cache_hit AS served,
        status,
        usage_reported,
        coalesce(error_type = 'abandoned', false) AS abandoned,
        latency_ms,
        input_tokens,
        cache_read_tokens,
        cost_usd
    FROM token_usage
    WHERE attempt >= 1
),
card AS (
    SELECT
        requested_model,
        upstream,
        count(*) AS attempts,
        count(*) FILTER (WHERE status = 'error' AND NOT abandoned) AS errors,
        count(*) FILTER (WHERE served) AS served_attempts,
        count(latency_ms) FILTER (WHERE served) AS latency_samples,
        quantile_cont(latency_ms, 0.5) FILTER (WHERE served) AS p50_latency_ms,
        quantile_cont(latency_ms, 0.95) FILTER (WHERE served) AS p95_latency_ms,
        sum(input_tokens) FILTER (WHERE served AND usage_reported) AS served_input_tokens,
        sum(cache_read_tokens) FILTER (WHERE served AND usage_reported)
            AS served_cache_read_tokens,
        sum(cost_usd) AS cost_usd,
        sum(cost_usd) FILTER (WHERE usage_reported) AS costed_cost_usd,
        sum(input_tokens) FILTER (WHERE cost_usd IS NOT NULL AND usage_reported)
            AS costed_input_tokens
    FROM attempts
    GROUP BY requested_model, upstream
),
pinned_sessions AS (
    SELECT requested_model, min(upstream) AS upstream
    FROM attempts
    WHERE served AND session_id IS NOT NULL
    GROUP BY session_id, actor_id, requested_model
    HAVING count(DISTINCT upstream) = 1
),
pinned AS (
    SELECT requested_model, upstream, count(*) AS sessions_pinned
    FROM pinned_sessions
    GROUP BY requested_model, upstream
)
SELECT
    c.requested_model,
    c.upstream,
    c.attempts,
    c.errors,
    CAST(c.errors AS DOUBLE) / c.attempts AS error_rate,
    c.served_attempts,
    c.latency_samples,
    c.p50_latency_ms,
    c.p95_latency_ms,
    CAST(c.served_cache_read_tokens AS DOUBLE) / nullif(c.served_input_tokens, 0)
        AS token_hit_rate,
    c.cost_usd,
    CAST(c.costed_cost_usd AS DOUBLE) * 1e6 / nullif(c.costed_input_tokens, 0)
        AS cost_per_mtok_input,
    coalesce(p.sessions_pinned, 0) AS sessions_pinned
FROM card AS c
LEFT JOIN pinned AS p USING (requested_model, upstream);
