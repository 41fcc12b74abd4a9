-- response_cache_models: per requested_model with response-cache hits, what
-- its served calls cost: the response cache's savings are priced from it
-- (Analytics.response_cache_saving: hits times the mean known cost of a
-- served call of the same model).
--
--   hits            = calls served from the response cache
--   served_cost_usd = known costs of the calls a provider answered
--   served_priced   = how many of those calls have a known cost
-- Summed from call_groups (priced_calls: calls with a known cost).
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
