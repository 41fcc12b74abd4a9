-- switch_counts, as stored in the analytics file: the same rows and columns as
-- sql/switch_counts.sql, read from state_moves (changed transitions counted per
-- model, agent, day and whole second of gap: ledger/analytics/moves.py).
--
-- A bucket gap_ceil_s holds the gaps in (gap_ceil_s - 1, gap_ceil_s]: with the
-- idle window w it is all switches when gap_ceil_s <= w, all idle releases
-- when gap_ceil_s - 1 >= w. Only a fractional w cuts a bucket (the straddling
-- one); its moves are read one by one from state_transitions. With a whole
-- number of seconds no bucket straddles, the join's build side is empty and
-- DuckDB never reads state_transitions.
CREATE OR REPLACE VIEW switch_counts AS
WITH knob AS (
    SELECT ledger_setting('idle_window_s') AS idle
),
buckets AS (
    SELECT
        m.*,
        coalesce(m.gap_ceil_s - 1 < k.idle AND k.idle < m.gap_ceil_s, false) AS straddles,
        m.gap_ceil_s <= k.idle AS is_switch
    FROM state_moves AS m
    CROSS JOIN knob AS k
),
straddling AS (
    SELECT
        s.requested_model,
        s.actor_id,
        b.day_number,
        t.gap_s <= k.idle AS is_switch,
        1 AS moves,
        CASE WHEN t.usage_reported THEN greatest(0,
            least(coalesce(t.previous_cache_read_tokens, 0), coalesce(t.input_tokens, 0))
                - coalesce(t.cache_read_tokens, 0)) ELSE 0 END AS tokens_lost
    FROM state_transitions AS t
    JOIN state_sessions AS s USING (sid)
    JOIN (SELECT * FROM buckets WHERE straddles) AS b
        ON s.requested_model IS NOT DISTINCT FROM b.requested_model
        AND s.actor_id IS NOT DISTINCT FROM b.actor_id
        AND epoch_us(t.started_at) // 86400000000 = b.day_number
        AND CAST(ceil(t.gap_s) AS BIGINT) = b.gap_ceil_s
    CROSS JOIN knob AS k
    WHERE t.changed
),
counted AS (
    SELECT requested_model, actor_id, day_number, is_switch, moves, tokens_lost
    FROM buckets
    WHERE NOT straddles
    UNION ALL
    SELECT requested_model, actor_id, day_number, is_switch, moves, tokens_lost
    FROM straddling
)
SELECT
    requested_model,
    actor_id,
    day_number,
    CAST(coalesce(sum(moves) FILTER (WHERE is_switch), 0) AS BIGINT) AS switches,
    CAST(coalesce(sum(moves) FILTER (WHERE NOT is_switch), 0) AS BIGINT) AS idle_releases,
    CAST(coalesce(sum(tokens_lost) FILTER (WHERE is_switch), 0) AS BIGINT)
        AS switch_tokens_lost,
    CAST(coalesce(sum(tokens_lost) FILTER (WHERE NOT is_switch), 0) AS BIGINT)
        AS release_tokens_lost
FROM counted
GROUP BY requested_model, actor_id, day_number;
