-- overview_totals: one row of headline figures over the calls view, the rows
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
CREATE OR REPLACE VIEW overview_totals AS
SELECT
    c.*,
    a.*,
    r.*
FROM (
    SELECT
        count(*) AS calls,
        count(*) FILTER (WHERE NOT response_cache_hit) AS provider_calls,
        sum(cost_usd) AS spend_usd,
        count(*) FILTER (WHERE cost_usd IS NULL AND NOT response_cache_hit) AS unpriced_calls,
        count(*) FILTER (WHERE fell_back) AS fallback_calls,
        count(*) FILTER (WHERE status = 'error') AS failed_calls,
        count(*) FILTER (WHERE response_cache_hit) AS response_cache_hits
    FROM calls
) AS c
CROSS JOIN (
    SELECT
        count(*) FILTER (WHERE attempt >= 1) AS attempts,
        count(*) FILTER (WHERE attempt >= 1 AND status = 'error') AS failed_attempts
    FROM token_usage
) AS a
CROSS JOIN ledger_span AS r;
