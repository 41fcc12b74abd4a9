-- cache_decay_by_key, as stored in the analytics file: the same rows and columns
-- as sql/cache_decay_by_key.sql (see there for the buckets and columns), read
-- from state_decay (the transitions summed per model, key_sent and whole second
-- of gap: ledger/analytics/decay.py). A bucket gap_ceil_s holds the gaps in
-- (gap_ceil_s - 1, gap_ceil_s], the last one (86401) every gap beyond a day. An
-- edge x below the bucket (x <= gap_ceil_s - 1) is below each of its gaps; only an
-- edge inside one (a fractional idle window, or one beyond a day) cuts it, and
-- that bucket's transitions are read one by one from state_transitions. With a
-- whole number of seconds under a day none is, the join's build side is empty
-- and DuckDB never reads state_transitions.
CREATE OR REPLACE VIEW cache_decay_by_key AS
WITH edges AS (
    SELECT
        list_sort(list_distinct([60.0, 300.0, ledger_setting('idle_window_s'), 1800.0, 3600.0]))
            AS e,
        ledger_setting('idle_window_s') AS window_s
),
decay AS (
    SELECT
        d.key_sent,
        d.gap_ceil_s,
        coalesce(d.gap_ceil_s - 1 < edges.window_s AND edges.window_s < d.gap_ceil_s, false)
            OR (d.gap_ceil_s = 86401 AND edges.window_s > 86400) AS straddles,
        -- the edges below the bucket, counted without a lambda per row (4 or 5 edges)
        CAST(edges.e[1] <= d.gap_ceil_s - 1 AS BIGINT)
            + CAST(edges.e[2] <= d.gap_ceil_s - 1 AS BIGINT)
            + CAST(edges.e[3] <= d.gap_ceil_s - 1 AS BIGINT)
            + CAST(edges.e[4] <= d.gap_ceil_s - 1 AS BIGINT)
            + CAST(coalesce(edges.e[5] <= d.gap_ceil_s - 1, false) AS BIGINT) AS gap_order,
        d.calls,
        d.reported_calls,
        d.input_tokens,
        d.cache_read_tokens,
        d.hit_calls
    FROM state_decay AS d
    CROSS JOIN edges
),
straddling AS (
    SELECT
        len(list_filter(edges.e, lambda x: t.gap_s > x)) AS gap_order,
        t.key_sent,
        1 AS calls,
        CAST(t.usage_reported AS BIGINT) AS reported_calls,
        CASE WHEN t.usage_reported THEN coalesce(t.input_tokens, 0) ELSE 0 END AS input_tokens,
        CASE WHEN t.usage_reported THEN coalesce(t.cache_read_tokens, 0) ELSE 0 END
            AS cache_read_tokens,
        CAST(coalesce(t.usage_reported AND t.cache_read_tokens > 0, false) AS BIGINT)
            AS hit_calls
    FROM state_transitions AS t
    JOIN (SELECT DISTINCT key_sent, gap_ceil_s FROM decay WHERE straddles) AS b
        ON t.key_sent IS NOT DISTINCT FROM b.key_sent
        AND least(CAST(ceil(t.gap_s) AS BIGINT), 86401) = b.gap_ceil_s
    CROSS JOIN edges
),
counted AS (
    SELECT gap_order, key_sent, calls, reported_calls, input_tokens, cache_read_tokens,
        hit_calls
    FROM decay
    WHERE NOT straddles
    UNION ALL
    SELECT gap_order, key_sent, calls, reported_calls, input_tokens, cache_read_tokens,
        hit_calls
    FROM straddling
),
grouped AS (
    SELECT
        c.gap_order,
        c.key_sent,
        any_value(edges.e)[c.gap_order] AS gap_from_s,
        any_value(edges.e)[c.gap_order + 1] AS gap_to_s,
        any_value(edges.window_s) AS window_s,
        CAST(sum(c.calls) AS BIGINT) AS calls,
        sum(c.reported_calls) AS reported_calls,
        CAST(sum(c.input_tokens) AS BIGINT) AS input_tokens,
        CAST(sum(c.cache_read_tokens) AS BIGINT) AS cache_read_tokens,
        sum(c.hit_calls) AS hit_calls
    FROM counted AS c
    CROSS JOIN edges
    GROUP BY c.gap_order, c.key_sent
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
