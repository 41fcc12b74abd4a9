-- response_cache_models, as stored in the analytics file: the same rows and
-- columns as sql/response_cache_models.sql, summed from call_groups.
CREATE OR REPLACE VIEW response_cache_models AS
SELECT
    requested_model,
    CAST(coalesce(sum(calls) FILTER (WHERE response_cache_hit), 0) AS BIGINT) AS hits,
    sum(cost_usd) FILTER (WHERE status = 'ok' AND NOT response_cache_hit) AS served_cost_usd,
    CAST(coalesce(sum(priced_calls) FILTER (WHERE status = 'ok' AND NOT response_cache_hit), 0)
        AS BIGINT) AS served_priced
FROM call_groups
GROUP BY requested_model
HAVING coalesce(sum(calls) FILTER (WHERE response_cache_hit), 0) > 0;
