-- session_stickiness: one row per session (session_id, actor_id, requested_model).
--
--   key_sent            = any of the session's served attempts carried a sticky key
--   calls               = served attempts (status = 'ok' AND NOT response_cache_hit)
--   transitions         = pairs of consecutive served attempts (view transitions)
--   window_transitions  = transitions whose gap is within the idle window
--   switches            = window transitions whose upstream identity differs
--   idle_releases       = transitions past the idle window whose identity differs
--   distinct_upstreams  = distinct coalesce(upstream, provider) over served attempts
--   stickiness          = 1 - switches / window_transitions; null when there are none
-- Sessions whose every attempt failed appear with calls = 0.
CREATE OR REPLACE VIEW session_stickiness AS
WITH sessions AS (
    SELECT
        session_id,
        actor_id,
        requested_model,
        coalesce(bool_or(session_key IS NOT NULL) FILTER (WHERE served), false) AS key_sent,
        count(*) FILTER (WHERE served) AS calls,
        count(DISTINCT coalesce(upstream, provider)) FILTER (WHERE served) AS distinct_upstreams
    FROM (
        SELECT *, status = 'ok' AND NOT response_cache_hit AS served
        FROM token_usage
        WHERE session_id IS NOT NULL
    )
    GROUP BY session_id, actor_id, requested_model
),
moves AS (
    SELECT
        session_id,
        actor_id,
        requested_model,
        count(*) AS transitions,
        count(*) FILTER (WHERE within_window) AS window_transitions,
        count(*) FILTER (WHERE is_switch) AS switches,
        count(*) FILTER (WHERE is_idle_release) AS idle_releases
    FROM transitions
    GROUP BY session_id, actor_id, requested_model
)
SELECT
    s.session_id,
    s.actor_id,
    s.requested_model,
    s.key_sent,
    s.calls,
    coalesce(m.transitions, 0) AS transitions,
    coalesce(m.window_transitions, 0) AS window_transitions,
    coalesce(m.switches, 0) AS switches,
    coalesce(m.idle_releases, 0) AS idle_releases,
    s.distinct_upstreams,
    CASE
        WHEN coalesce(m.window_transitions, 0) > 0
        THEN 1 - CAST(m.switches AS DOUBLE) / m.window_transitions
    END AS stickiness
FROM sessions AS s
LEFT JOIN moves AS m
    ON s.session_id = m.session_id
    AND s.actor_id IS NOT DISTINCT FROM m.actor_id
    AND s.requested_model = m.requested_model;
