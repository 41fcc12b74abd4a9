-- session_stickiness, as stored in the analytics file: the same rows and
-- columns as views/session_stickiness.sql, read from state_sessions (per-session
-- counts kept by sync) and state_transitions.
--
-- state_sessions holds, per session, transitions (all of them) and changes
-- (those whose upstream identity differs). Only the transitions past the idle
-- window are counted here, so the window stays a live setting:
--   window_transitions = transitions - (transitions with gap_s > window)
--   idle_releases      = changes with gap_s > window
--   switches           = changes - idle_releases
CREATE OR REPLACE VIEW session_stickiness AS
WITH idle AS (
    SELECT
        sid,
        count(*) AS past_window,
        count(*) FILTER (WHERE changed) AS idle_releases
    FROM state_transitions
    WHERE gap_s > ledger_setting('idle_window_s')
    GROUP BY sid
),
counted AS (
    SELECT
        s.session_id,
        s.actor_id,
        s.requested_model,
        coalesce(s.key_sent, false) AS key_sent,
        s.calls,
        s.transitions,
        s.transitions - coalesce(i.past_window, 0) AS window_transitions,
        s.changes - coalesce(i.idle_releases, 0) AS switches,
        coalesce(i.idle_releases, 0) AS idle_releases,
        array_length(s.upstreams) AS distinct_upstreams
    FROM state_sessions AS s
    LEFT JOIN idle AS i USING (sid)
)
SELECT
    *,
    CASE
        WHEN window_transitions > 0 THEN 1 - CAST(switches AS DOUBLE) / window_transitions
    END AS stickiness
FROM counted;
