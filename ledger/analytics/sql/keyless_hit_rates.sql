-- keyless_hit_rates: one row per requested_model with served attempts sent
-- without a sticky key. A helper of provider_order_verdict: the prompt-cache
-- hit rate an upstream can expect once provider.order turns sticky routing off.
--
--   keyless_attempts = attempts >= 1 with status 'ok', not a response-cache hit,
--                      and session_key IS NULL
--   hit_rate         = sum(cache_read_tokens) / sum(input_tokens) over those whose
--                      usage was reported, when there are >= ledger_setting('min_samples')
--                      of them; else null
-- Summed from attempt_groups (is_attempt: attempt >= 1; key_sent: session_key
-- IS NOT NULL).
CREATE OR REPLACE VIEW keyless_hit_rates AS
SELECT
    requested_model,
    CAST(sum(rows) AS BIGINT) AS keyless_attempts,
    CASE
        WHEN coalesce(sum(rows) FILTER (WHERE usage_reported), 0) >= any_value(knobs.min_samples)
        THEN CAST(sum(cache_read_tokens) FILTER (WHERE usage_reported) AS DOUBLE)
            / nullif(sum(input_tokens) FILTER (WHERE usage_reported), 0)
    END AS hit_rate
FROM attempt_groups, (SELECT ledger_setting('min_samples') AS min_samples) AS knobs
WHERE is_attempt AND status = 'ok' AND NOT response_cache_hit AND NOT key_sent
GROUP BY requested_model;
