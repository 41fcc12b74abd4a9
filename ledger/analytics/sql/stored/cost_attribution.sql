-- cost_attribution, as stored in the analytics file: the same rows and columns
-- as sql/cost_attribution.sql, summed from call_groups (the calls counted per
-- agent, provider, model and outcome) instead of one row per call.
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
