-- cache_decay, as stored in the analytics file: the same rows and columns as
-- sql/cache_decay.sql (see there for the buckets and columns), read from
-- state_decay (the transitions summed per model, key_sent and whole second of
-- gap: ledger/analytics/decay.py). The edges are whole seconds, so a bucket
-- gap_ceil_s (gaps in (gap_ceil_s - 1, gap_ceil_s]) is below an edge exactly
-- when gap_ceil_s is; the last bucket (gaps beyond a day) is 30+ min.
CREATE OR REPLACE VIEW cache_decay AS
WITH grouped AS (
    SELECT
        requested_model,
        CASE
            WHEN gap_ceil_s <= 60 THEN 0
            WHEN gap_ceil_s <= 300 THEN 1
            WHEN gap_ceil_s <= 600 THEN 2
            WHEN gap_ceil_s <= 1800 THEN 3
            ELSE 4
        END AS gap_order,
        CAST(sum(calls) AS BIGINT) AS calls,
        CAST(sum(changed_upstream) AS BIGINT) AS changed_upstream,
        sum(reported_calls) AS reported_calls,
        CAST(sum(input_tokens) AS BIGINT) AS input_tokens,
        CAST(sum(cache_read_tokens) AS BIGINT) AS cache_read_tokens,
        sum(hit_calls) AS hit_calls
    FROM state_decay
    GROUP BY ALL
)
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
FROM grouped;
