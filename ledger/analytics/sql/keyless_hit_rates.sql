-- keyless_hit_rates: one row per requested_model with served attempts sent
-- without a sticky key. A helper of provider_order_verdict: the prompt-cache
-- hit rate an upstream can expect once provider.order turns sticky routing off.
--
--   keyless_attempts = attempts >= 1 with status 'ok', not a response-cache hit,
--                      and session_key IS NULL
--   hit_rate         = sum(cache_read_tokens) / sum(input_tokens) over those whose
--                      usage was reported, when there are >= ledger_setting('min_samples')
--                      of them; else null
CREATE OR REPLACE VIEW keyless_hit_rates AS
SELECT
    requested_model,
    count(*) AS keyless_attempts,
    CASE
        WHEN count(*) FILTER (WHERE usage_reported) >= any_value(knobs.min_samples)
        THEN CAST(sum(cache_read_tokens) FILTER (WHERE usage_reported) AS DOUBLE)
            / nullif(sum(input_tokens) FILTER (WHERE usage_reported), 0)
    END AS hit_rate
FROM token_usage, (SELECT ledger_setting('min_samples') AS min_samples) AS knobs
WHERE attempt >= 1 AND status = 'ok' AND NOT response_cache_hit AND session_key IS NULL
GROUP BY requested_model;
