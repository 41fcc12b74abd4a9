-- cache_hits: prompt-cache hit rates per (actor_id, requested_model, upstream
-- identity as column upstream, key_sent), key_sent at row level
-- (session_key IS NOT NULL). Response-cache hits are counted apart: they never
-- reach a provider, so they are in no hit rate.
--
--   calls               = served attempts (status = 'ok' AND NOT response_cache_hit)
--   reported_calls      = those whose usage was reported (usage_reported): the
--                         rates' base, so a missing usage never counts as a miss
--   input_tokens,
--   cache_read_tokens,
--   cache_write_tokens  = sums over the reported served attempts (input_tokens
--                         counts *all* prompt tokens, cache reads and writes included)
--   token_hit_rate      = cache_read_tokens / input_tokens; null when no input tokens
--   hit_calls           = reported served attempts with cache_read_tokens > 0
--   call_hit_rate       = hit_calls / reported_calls
--   response_cache_hits = rows with response_cache_hit in the same group
-- Failed attempts are in no column here (upstream_scorecard counts them).
-- Summed from attempt_groups (its groups keep agent, model, provider, upstream,
-- key_sent, status and the cache flags).
CREATE OR REPLACE VIEW cache_hits AS
WITH grouped AS (
    SELECT
        actor_id,
        requested_model,
        coalesce(upstream, provider) AS upstream,
        key_sent,
        CAST(coalesce(sum(rows) FILTER (WHERE served), 0) AS BIGINT) AS calls,
        CAST(coalesce(sum(rows) FILTER (WHERE counted), 0) AS BIGINT) AS reported_calls,
        CAST(coalesce(sum(input_tokens) FILTER (WHERE counted), 0) AS BIGINT) AS input_tokens,
        CAST(coalesce(sum(cache_read_tokens) FILTER (WHERE counted), 0) AS BIGINT)
            AS cache_read_tokens,
        CAST(coalesce(sum(cache_write_tokens) FILTER (WHERE counted), 0) AS BIGINT)
            AS cache_write_tokens,
        CAST(coalesce(sum(read_rows) FILTER (WHERE counted), 0) AS BIGINT) AS hit_calls,
        CAST(coalesce(sum(rows) FILTER (WHERE response_cache_hit), 0) AS BIGINT)
            AS response_cache_hits
    FROM (
        SELECT
            *,
            status = 'ok' AND NOT response_cache_hit AS served,
            status = 'ok' AND NOT response_cache_hit AND usage_reported AS counted
        FROM attempt_groups
        WHERE status = 'ok' OR response_cache_hit
    )
    GROUP BY actor_id, requested_model, coalesce(upstream, provider), key_sent
)
SELECT
    actor_id,
    requested_model,
    upstream,
    key_sent,
    calls,
    reported_calls,
    input_tokens,
    cache_read_tokens,
    cache_write_tokens,
    CAST(cache_read_tokens AS DOUBLE) / nullif(input_tokens, 0) AS token_hit_rate,
    hit_calls,
    CAST(hit_calls AS DOUBLE) / nullif(reported_calls, 0) AS call_hit_rate,
    response_cache_hits
FROM grouped;
