-- cache_hits, as stored in the analytics file: the same rows and columns as
-- views/cache_hits.sql, summed from state_rollup (row counts and token sums
-- per agent, model, provider, upstream, key_sent, status and cache flags).
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
        FROM state_rollup
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
