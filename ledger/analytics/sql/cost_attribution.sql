-- cost_attribution: one row per (requested_provider, responding_provider,
-- requested_model), over the calls view. responding_provider is null for calls
-- whose every attempt failed, so their spend stays visible.
--
--   calls          = calls in the group
--   cost_usd       = sum of the calls' known costs (failed attempts' spend included)
--   fallback_calls = calls answered by an attempt after the first (fell_back)
CREATE OR REPLACE VIEW cost_attribution AS
SELECT
    requested_provider,
    responding_provider,
    requested_model,
    count(*) AS calls,
    sum(cost_usd) AS cost_usd,
    count(*) FILTER (WHERE fell_back) AS fallback_calls
FROM calls
GROUP BY requested_provider, responding_provider, requested_model;
