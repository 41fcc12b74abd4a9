-- openrouter_upstreams: one row per (requested_model, upstream) over the attempts
-- that went to OpenRouter (provider = 'openrouter', attempt >= 1). A helper of
-- provider_order_verdict: provider.order is an OpenRouter routing setting, so
-- only these attempts say anything about it.
--
--   upstream = the upstream OpenRouter named, as recorded; NULL groups the
--              attempts that named none (failed attempts whose error did not
--              say which upstream failed: OpenRouter retries other upstreams
--              internally, so most failures never reach the ledger with one)
--   attempts = rows in the group
--   errors   = those with status = 'error'
-- Summed from attempt_groups (is_attempt: attempt >= 1).
CREATE OR REPLACE VIEW openrouter_upstreams AS
SELECT
    requested_model,
    upstream,
    CAST(sum(rows) AS BIGINT) AS attempts,
    CAST(coalesce(sum(rows) FILTER (WHERE status = 'error'), 0) AS BIGINT) AS errors
FROM attempt_groups
WHERE is_attempt AND provider = 'openrouter'
GROUP BY requested_model, upstream;
