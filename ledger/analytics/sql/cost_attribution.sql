-- cost_attribution: one row per (requested_provider, responding_provider,
-- requested_model), over call_groups. responding_provider is null for calls
-- whose every attempt failed, so their spend stays visible.
--
--   calls          = calls in the group
--   cost_usd       = sum of the calls' known costs (failed attempts' spend included)
--   fallback_calls = calls answered by an attempt after the first (fell_back)
-- Summed from call_groups (the calls counted per agent, provider, model and
-- outcome), which is small over any number of calls.
CREATE OR REPLACE VIEW cost_attribution AS
SELECT
    requested_provider,
    responding_provider,
    requested_model,
    CAST(sum(calls) AS BIGINT) AS calls,
    sum(cost_usd) AS cost_usd,
    CAST(coalesce(sum(calls) FILTER (WHERE fell_back), 0) AS BIGINT) AS fallback_calls
FROM call_groups
GROUP BY requested_provider, responding_provider, requested_model;
