-- cache_decay: one row per (requested_model, idle-gap bucket) with transitions:
-- the prompt-cache hit rate of a session's served attempt by the idle gap before
-- it (its transition's gap, see transitions), so OpenRouter's 10-minute pin
-- release and the providers' cache lifetimes (5 minutes to an hour) show.
--
-- Buckets (minutes, upper edge inclusive): 0–1, 1–5, 5–10, 10–30, 30+.
--
--   gap_order          = the bucket's rank, 0 for 0–1 min
--   idle_gap           = its label ('0–1 min', …, '30+ min')
--   gap_from_s,
--   gap_to_s           = its bounds: gap_from_s < gap_s <= gap_to_s (gap_to_s null: open)
--   calls              = served attempts with a previous one in their session
--   changed_upstream   = those served by another upstream identity than the previous one
--   input_tokens,
--   cache_read_tokens  = their sums, over those whose usage was reported
--   token_hit_rate     = cache_read_tokens / input_tokens
--   call_hit_rate      = attempts with cache_read_tokens > 0 / those whose usage
--                        was reported (a missing usage is no miss)
CREATE OR REPLACE VIEW cache_decay AS
WITH bucketed AS (
    SELECT
        requested_model,
        CASE
            WHEN gap_s <= 60 THEN 0
            WHEN gap_s <= 300 THEN 1
            WHEN gap_s <= 600 THEN 2
            WHEN gap_s <= 1800 THEN 3
            ELSE 4
        END AS gap_order,
        upstream IS DISTINCT FROM previous_upstream AS changed,
        input_tokens,
        cache_read_tokens,
        usage_reported
    FROM transitions
),
grouped AS (
    SELECT
        requested_model,
        gap_order,
        count(*) AS calls,
        count(*) FILTER (WHERE changed) AS changed_upstream,
        count(*) FILTER (WHERE usage_reported) AS reported_calls,
        CAST(coalesce(sum(input_tokens) FILTER (WHERE usage_reported), 0) AS BIGINT)
            AS input_tokens,
        CAST(coalesce(sum(cache_read_tokens) FILTER (WHERE usage_reported), 0) AS BIGINT)
            AS cache_read_tokens,
        count(*) FILTER (WHERE usage_reported AND cache_read_tokens > 0) AS hit_calls
    FROM bucketed
    GROUP BY requested_model, gap_order
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
