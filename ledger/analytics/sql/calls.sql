-- calls: one row per logical call (call_id), folding its attempts (contract §2).
--
--   started_at          = min(started_at) over the call's rows (its first attempt)
--   responding_provider = provider of the call's 'ok' row (null when every attempt failed)
--   upstream            = upstream of the 'ok' row (null for direct providers)
--   attempts            = rows with attempt >= 1 (a response-cache hit is attempt 0)
--   fell_back           = the 'ok' row's attempt > 1
--   status              = 'ok' if any row is ok, else 'error'
--   response_cache_hit  = any row was served from the response cache
--   tokens, cost_usd,
--   latency_ms          = sums over the call's rows; cost_usd sums the known costs
--                         (null only when no row's cost is known)
--   key_sent            = any row carried a sticky key (extra column, for filtering)
CREATE OR REPLACE VIEW calls AS
SELECT
    call_id,
    min(started_at) AS started_at,
    any_value(session_id) AS session_id,
    any_value(actor_id) AS actor_id,
    any_value(requested_provider) AS requested_provider,
    any_value(requested_model) AS requested_model,
    max(provider) FILTER (WHERE status = 'ok') AS responding_provider,
    max(upstream) FILTER (WHERE status = 'ok') AS upstream,
    count(*) FILTER (WHERE attempt >= 1) AS attempts,
    coalesce(max(attempt) FILTER (WHERE status = 'ok') > 1, false) AS fell_back,
    CASE WHEN bool_or(status = 'ok') THEN 'ok' ELSE 'error' END AS status,
    bool_or(response_cache_hit) AS response_cache_hit,
    CAST(sum(input_tokens) AS BIGINT) AS input_tokens,
    CAST(sum(output_tokens) AS BIGINT) AS output_tokens,
    CAST(sum(cache_read_tokens) AS BIGINT) AS cache_read_tokens,
    CAST(sum(cache_write_tokens) AS BIGINT) AS cache_write_tokens,
    sum(cost_usd) AS cost_usd,
    sum(latency_ms) AS latency_ms,
    bool_or(session_key IS NOT NULL) AS key_sent
FROM token_usage
GROUP BY call_id;
