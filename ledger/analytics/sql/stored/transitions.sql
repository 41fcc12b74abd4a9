-- transitions, as stored in the analytics file: the same rows and columns as
-- views/transitions.sql, read from state_transitions (one row per transition,
-- kept by sync; its session's names are state_sessions', by sid). The idle
-- window is applied here, so a changed setting counts at once.
CREATE OR REPLACE VIEW transitions AS
SELECT
    s.session_id,
    s.actor_id,
    s.requested_model,
    t.previous_started_at,
    t.started_at,
    t.previous_upstream,
    t.upstream,
    t.key_sent,
    t.gap_s,
    t.gap_s <= ledger_setting('idle_window_s') AS within_window,
    t.changed AND t.gap_s <= ledger_setting('idle_window_s') AS is_switch,
    t.changed AND t.gap_s > ledger_setting('idle_window_s') AS is_idle_release,
    t.input_tokens,
    t.cache_read_tokens,
    t.usage_reported,
    t.previous_cache_read_tokens
FROM state_transitions AS t
JOIN state_sessions AS s USING (sid);
