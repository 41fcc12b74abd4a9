-- cost_by_agent, as stored in the analytics file: the same rows and columns as
-- sql/cost_by_agent.sql, summed from call_groups.
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
