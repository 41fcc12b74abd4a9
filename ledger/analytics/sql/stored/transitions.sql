-- transitions, as stored in the analytics file: the same rows and columns as
-- views/transitions.sql, read from state_transitions (one row per transition,
-- kept by sync). The idle window is applied here, so a changed setting counts
-- at once.
CREATE OR REPLACE VIEW transitions AS
SELECT
    session_id,
    actor_id,
    requested_model,
    previous_started_at,
    started_at,
    previous_upstream,
    upstream,
    key_sent,
    gap_s,
    gap_s <= ledger_setting('idle_window_s') AS within_window,
    changed AND gap_s <= ledger_setting('idle_window_s') AS is_switch,
    changed AND gap_s > ledger_setting('idle_window_s') AS is_idle_release,
    input_tokens,
    cache_read_tokens,
    usage_reported,
    previous_cache_read_tokens
FROM state_transitions;
