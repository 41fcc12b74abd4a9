-- keyless_hit_rates, as stored in the analytics file: the same rows and
-- columns as views/keyless_hit_rates.sql, summed from state_rollup.
CREATE OR REPLACE VIEW keyless_hit_rates AS
SELECT
    requested_model,
    CAST(sum(rows) AS BIGINT) AS keyless_attempts,
    CASE
        WHEN coalesce(sum(rows) FILTER (WHERE usage_reported), 0) >= any_value(knobs.min_samples)
        THEN CAST(sum(cache_read_tokens) FILTER (WHERE usage_reported) AS DOUBLE)
            / nullif(sum(input_tokens) FILTER (WHERE usage_reported), 0)
    END AS hit_rate
FROM state_rollup, (SELECT ledger_setting('min_samples') AS min_samples) AS knobs
WHERE is_attempt AND status = 'ok' AND NOT response_cache_hit AND NOT key_sent
GROUP BY requested_model;
