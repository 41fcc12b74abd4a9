-- overview_totals, as stored in the analytics file: the same row and columns as
-- sql/overview_totals.sql. The call counts are summed from call_groups, the
-- attempt counts from state_rollup, first_at and last_at from ledger_span
-- (state_span).
CREATE OR REPLACE VIEW overview_totals AS
SELECT
    c.*,
    a.*,
    r.*
FROM (
    SELECT
        CAST(coalesce(sum(calls), 0) AS BIGINT) AS calls,
        CAST(coalesce(sum(calls) FILTER (WHERE NOT response_cache_hit), 0) AS BIGINT)
            AS provider_calls,
        sum(cost_usd) AS spend_usd,
        CAST(coalesce(sum(calls - priced_calls) FILTER (WHERE NOT response_cache_hit), 0)
            AS BIGINT) AS unpriced_calls,
        CAST(coalesce(sum(calls) FILTER (WHERE fell_back), 0) AS BIGINT) AS fallback_calls,
        CAST(coalesce(sum(calls) FILTER (WHERE status = 'error'), 0) AS BIGINT)
            AS failed_calls,
        CAST(coalesce(sum(calls) FILTER (WHERE response_cache_hit), 0) AS BIGINT)
            AS response_cache_hits
    FROM call_groups
) AS c
CROSS JOIN (
    SELECT
        CAST(coalesce(sum(rows) FILTER (WHERE is_attempt), 0) AS BIGINT) AS attempts,
        CAST(coalesce(sum(rows) FILTER (WHERE is_attempt AND status = 'error'), 0) AS BIGINT)
            AS failed_attempts
    FROM state_rollup
) AS a
CROSS JOIN ledger_span AS r;
