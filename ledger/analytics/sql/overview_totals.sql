-- overview_totals: one row of headline figures over call_groups, attempt_groups
-- and ledger_span.
--
--   calls               = calls (response-cache hits included)
--   provider_calls      = calls not served from the response cache
--   spend_usd           = the calls' known costs (null when none is known)
--   unpriced_calls      = provider calls whose cost is unknown
--   fallback_calls      = calls answered after a fallback (fell_back)
--   failed_calls        = calls whose every attempt failed
--   response_cache_hits = calls served from the response cache
--   attempts            = rows with attempt >= 1
--   failed_attempts     = those with status = 'error'
--   first_at, last_at   = the first and last started_at (ledger_span)
-- The call counts are summed from call_groups, the attempt counts from
-- attempt_groups (is_attempt: attempt >= 1).
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
    FROM attempt_groups
) AS a
CROSS JOIN ledger_span AS r;
