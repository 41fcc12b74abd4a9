-- call_groups: the calls counted per (actor_id, requested_provider,
-- responding_provider, requested_model, fell_back, status, response_cache_hit),
-- over the calls view. A helper of the cost views' stored variants
-- (sql/stored/cost_attribution.sql and others), which read these groups instead
-- of one row per call.
--
--   calls        = calls in the group
--   priced_calls = those with a known cost
--   cost_usd     = the sum of their known costs (null when none is known)
CREATE OR REPLACE VIEW call_groups AS
SELECT
    actor_id,
    requested_provider,
    responding_provider,
    requested_model,
    fell_back,
    status,
    response_cache_hit,
    count(*) AS calls,
    count(cost_usd) AS priced_calls,
    sum(cost_usd) AS cost_usd
FROM calls
GROUP BY
    actor_id, requested_provider, responding_provider, requested_model, fell_back, status,
    response_cache_hit;
