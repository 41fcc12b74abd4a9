-- agent_stickiness: one row per (actor_id, requested_model, key_sent), key_sent
-- being the session's (see session_stickiness). Built from session_stickiness.
--
--   sessions               = sessions with >= 1 served attempt
--   calls, transitions,
--   window_transitions,
--   switches, idle_releases = sums over the group's sessions
--   stickiness             = 1 - sum(switches) / sum(window_transitions); null when 0
--   pinned_session_share   = among sessions with >= 2 calls, the share whose served
--                            attempts all went to one upstream identity; null when none
--   avg_distinct_upstreams = mean of distinct_upstreams over sessions with >= 1 call
-- A group with no such session has no row: a session whose attempts all failed
-- has no served attempt to say whether the key was sent, and would show as an
-- empty "key not sent" row beside the agent's real ones.
CREATE OR REPLACE VIEW agent_stickiness AS
SELECT
    actor_id,
    requested_model,
    key_sent,
    count(*) FILTER (WHERE calls >= 1) AS sessions,
    CAST(sum(calls) AS BIGINT) AS calls,
    CAST(sum(transitions) AS BIGINT) AS transitions,
    CAST(sum(window_transitions) AS BIGINT) AS window_transitions,
    CAST(sum(switches) AS BIGINT) AS switches,
    CAST(sum(idle_releases) AS BIGINT) AS idle_releases,
    CASE
        WHEN sum(window_transitions) > 0
        THEN 1 - CAST(sum(switches) AS DOUBLE) / sum(window_transitions)
    END AS stickiness,
    CAST(count(*) FILTER (WHERE calls >= 2 AND distinct_upstreams = 1) AS DOUBLE)
        / nullif(count(*) FILTER (WHERE calls >= 2), 0) AS pinned_session_share,
    avg(distinct_upstreams) FILTER (WHERE calls >= 1) AS avg_distinct_upstreams
FROM session_stickiness
GROUP BY actor_id, requested_model, key_sent
HAVING count(*) FILTER (WHERE calls >= 1) > 0;
