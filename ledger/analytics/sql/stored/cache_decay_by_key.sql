-- cache_decay_by_key, as stored in the analytics file: the same rows and columns
-- as sql/cache_decay_by_key.sql (see there for the buckets and columns), read
-- from state_transitions itself: the transitions view would join every
-- transition to its session for names this view does not use.
CREATE OR REPLACE VIEW cache_decay_by_key AS
WITH edges AS (
    SELECT
        list_sort(list_distinct([60.0, 300.0, ledger_setting('idle_window_s'), 1800.0, 3600.0]))
            AS e,
        ledger_setting('idle_window_s') AS window_s
),
bucketed AS (
    SELECT
        -- the edges below the gap, counted without a lambda per transition (4 or 5 edges)
        CAST(t.gap_s > edges.e[1] AS BIGINT) + CAST(t.gap_s > edges.e[2] AS BIGINT)
            + CAST(t.gap_s > edges.e[3] AS BIGINT) + CAST(t.gap_s > edges.e[4] AS BIGINT)
            + CAST(coalesce(t.gap_s > edges.e[5], false) AS BIGINT) AS gap_order,
        t.key_sent,
        t.input_tokens,
        t.cache_read_tokens,
        t.usage_reported,
        edges.e,
        edges.window_s
    FROM state_transitions AS t
    CROSS JOIN edges
),
grouped AS (
    SELECT
        gap_order,
        key_sent,
        any_value(e)[gap_order] AS gap_from_s,
        any_value(e)[gap_order + 1] AS gap_to_s,
        any_value(window_s) AS window_s,
        count(*) AS calls,
        count(*) FILTER (WHERE usage_reported) AS reported_calls,
        CAST(coalesce(sum(input_tokens) FILTER (WHERE usage_reported), 0) AS BIGINT)
            AS input_tokens,
        CAST(coalesce(sum(cache_read_tokens) FILTER (WHERE usage_reported), 0) AS BIGINT)
            AS cache_read_tokens,
        count(*) FILTER (WHERE usage_reported AND cache_read_tokens > 0) AS hit_calls
    FROM bucketed
    GROUP BY gap_order, key_sent
),
labelled AS (
    SELECT
        *,
        CASE
            WHEN gap_from_s % 3600 = 0 THEN printf('%d h', CAST(gap_from_s // 3600 AS BIGINT))
            WHEN gap_from_s % 60 = 0 THEN printf('%d min', CAST(gap_from_s // 60 AS BIGINT))
            ELSE printf('%g s', gap_from_s)
        END AS from_label,
        CASE
            WHEN gap_to_s % 3600 = 0 THEN printf('%d h', CAST(gap_to_s // 3600 AS BIGINT))
            WHEN gap_to_s % 60 = 0 THEN printf('%d min', CAST(gap_to_s // 60 AS BIGINT))
            ELSE printf('%g s', gap_to_s)
        END AS to_label
    FROM grouped
)
SELECT
    gap_order,
    CASE
        WHEN gap_from_s IS NULL THEN '≤ ' || to_label
        WHEN gap_to_s IS NULL THEN '> ' || from_label
        ELSE from_label || ' – ' || to_label
    END AS idle_gap,
    gap_from_s,
    gap_to_s,
    coalesce(gap_to_s <= window_s, false) AS within_window,
    key_sent,
    calls,
    input_tokens,
    cache_read_tokens,
    CAST(cache_read_tokens AS DOUBLE) / nullif(input_tokens, 0) AS token_hit_rate,
    CAST(hit_calls AS DOUBLE) / nullif(reported_calls, 0) AS call_hit_rate
FROM labelled;
