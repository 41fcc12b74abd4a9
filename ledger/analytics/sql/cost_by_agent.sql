-- cost_by_agent: cost_attribution split by agent too, one row per (actor_id,
-- requested_model, requested_provider, responding_provider), over call_groups.
--
--   calls          = calls in the group
--   cost_usd       = sum of their known costs (null when none is known)
--   fallback_calls = calls answered by an attempt after the first (fell_back)
-- Summed from call_groups.
CREATE OR REPLACE VIEW cost_by_agent AS
SELECT
    actor_id,
    requested_model,
    requested_provider,
    responding_provider,
    CAST(sum(calls) AS BIGINT) AS calls,
    sum(cost_usd) AS cost_usd,
    CAST(coalesce(sum(calls) FILTER (WHERE fell_back), 0) AS BIGINT) AS fallback_calls
FROM call_groups
GROUP BY actor_id, requested_model, requested_provider, responding_provider;
