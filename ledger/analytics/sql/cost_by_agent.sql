-- cost_by_agent: cost_attribution split by agent too, one row per (actor_id,
-- requested_model, requested_provider, responding_provider), over the calls view.
--
--   calls          = calls in the group
--   cost_usd       = sum of their known costs (null when none is known)
--   fallback_calls = calls answered by an attempt after the first (fell_back)
CREATE OR REPLACE VIEW cost_by_agent AS
SELECT
    actor_id,
    requested_model,
    requested_provider,
    responding_provider,
    count(*) AS calls,
    sum(cost_usd) AS cost_usd,
    count(*) FILTER (WHERE fell_back) AS fallback_calls
FROM calls
GROUP BY actor_id, requested_model, requested_provider, responding_provider;
