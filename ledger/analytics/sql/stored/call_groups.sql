-- call_groups, as stored in the analytics file: the same rows and columns as
-- sql/call_groups.sql. The one-row calls come counted from state_call_rollup
-- (ledger/analytics/call_rollup.py), the calls of several rows from
-- state_calls, projected as sql/stored/calls.sql projects them.
CREATE OR REPLACE VIEW call_groups AS
SELECT
    actor_id,
    requested_provider,
    responding_provider,
    requested_model,
    fell_back,
    status,
    response_cache_hit,
    CAST(sum(calls) AS BIGINT) AS calls,
    CAST(sum(priced_calls) AS BIGINT) AS priced_calls,
    sum(cost_usd) AS cost_usd
FROM (
    SELECT
        actor_id, requested_provider, responding_provider, requested_model, fell_back, status,
        response_cache_hit, calls, priced_calls, cost_usd
    FROM state_call_rollup
    UNION ALL
    SELECT
        actor_id, requested_provider, responding_provider, requested_model,
        coalesce(max_ok_attempt > 1, false) AS fell_back,
        CASE WHEN any_ok THEN 'ok' ELSE 'error' END AS status,
        response_cache_hit,
        1 AS calls,
        CAST(cost_usd IS NOT NULL AS BIGINT) AS priced_calls,
        cost_usd
    FROM state_calls
)
GROUP BY
    actor_id, requested_provider, responding_provider, requested_model, fell_back, status,
    response_cache_hit;
