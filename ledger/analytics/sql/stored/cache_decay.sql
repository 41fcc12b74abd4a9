-- cache_decay, as stored in the analytics file: the same rows and columns as
-- sql/cache_decay.sql (see there for the buckets and columns), read from
-- state_decay (the transitions summed per model and bucket: ledger/analytics/decay.py).
CREATE OR REPLACE VIEW cache_decay AS
SELECT
    requested_model,
    gap_order,
    ['0–1 min', '1–5 min', '5–10 min', '10–30 min', '30+ min'][gap_order + 1] AS idle_gap,
    [0.0, 60.0, 300.0, 600.0, 1800.0][gap_order + 1] AS gap_from_s,
    [60.0, 300.0, 600.0, 1800.0, NULL][gap_order + 1] AS gap_to_s,
    calls,
    changed_upstream,
    input_tokens,
    cache_read_tokens,
    CAST(cache_read_tokens AS DOUBLE) / nullif(input_tokens, 0) AS token_hit_rate,
    CAST(hit_calls AS DOUBLE) / nullif(reported_calls, 0) AS call_hit_rate
FROM state_decay;
