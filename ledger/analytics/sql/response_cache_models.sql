-- response_cache_models: per requested_model with response-cache hits, what
-- its served calls cost: the response cache's savings are priced from it
-- (Analytics.response_cache_saving: hits times the mean known cost of a
-- served call of the same model).
--
--   hits            = calls served from the response cache
--   served_cost_usd = known costs of the calls a provider answered
--   served_priced   = how many of those calls have a known cost
CREATE OR REPLACE VIEW response_cache_models AS
SELECT
    requested_model,
    count(*) FILTER (WHERE response_cache_hit) AS hits,
    sum(cost_usd) FILTER (WHERE status = 'ok' AND NOT response_cache_hit) AS served_cost_usd,
    count(cost_usd) FILTER (WHERE status = 'ok' AND NOT response_cache_hit) AS served_priced
FROM calls
GROUP BY requested_model
HAVING count(*) FILTER (WHERE response_cache_hit) > 0;
