-- transitions: one row per pair of consecutive served attempts of one session.
-- A helper of session_stickiness and agent_stickiness (contract §2 definitions).
--
--   upstream identity  = coalesce(upstream, provider)
--   served attempt     = status = 'ok' AND NOT response_cache_hit
--   session            = (session_id, actor_id, requested_model); rows without
--                        session_id form no transitions
--   order              = (started_at, attempt), then id so ties are stable
--   gap_s              = seconds between the two started_at
--   within_window      = gap_s <= idle window (ledger_setting('idle_window_s'), 600 s)
--   is_switch          = identity differs AND within_window
--   is_idle_release    = identity differs AND NOT within_window (the pin had expired)
--   key_sent           = this attempt carried a sticky key (session_key IS NOT NULL)
--   input_tokens,
--   cache_read_tokens  = this (the later) attempt's, for hit rates by idle gap
--   usage_reported     = whether those counts are its reported usage (rates skip it if not)
--   previous_cache_read_tokens = the previous attempt's cache reads (what a
--                        switch or idle release can lose: switch_costs)
CREATE OR REPLACE VIEW transitions AS
WITH served AS (
    SELECT
        id,
        session_id,
        actor_id,
        requested_model,
        started_at,
        attempt,
        coalesce(upstream, provider) AS upstream,
        session_key IS NOT NULL AS key_sent,
        input_tokens,
        cache_read_tokens,
        usage_reported
    FROM token_usage
    WHERE status = 'ok' AND NOT response_cache_hit AND session_id IS NOT NULL
),
paired AS (
    SELECT
        *,
        lag(upstream) OVER w AS previous_upstream,
        lag(started_at) OVER w AS previous_started_at,
        lag(cache_read_tokens) OVER w AS previous_cache_read_tokens
    FROM served
    WINDOW w AS (PARTITION BY session_id, actor_id, requested_model ORDER BY started_at, attempt, id)
),
measured AS (
    SELECT
        session_id,
        actor_id,
        requested_model,
        previous_started_at,
        started_at,
        previous_upstream,
        upstream,
        key_sent,
        (epoch_us(started_at) - epoch_us(previous_started_at)) / 1e6 AS gap_s,
        input_tokens,
        cache_read_tokens,
        usage_reported,
        previous_cache_read_tokens
    FROM paired
    WHERE previous_started_at IS NOT NULL
)
SELECT
    * EXCLUDE (input_tokens, cache_read_tokens, usage_reported, previous_cache_read_tokens),
    gap_s <= ledger_setting('idle_window_s') AS within_window,
    upstream <> previous_upstream AND gap_s <= ledger_setting('idle_window_s') AS is_switch,
    upstream <> previous_upstream AND gap_s > ledger_setting('idle_window_s') AS is_idle_release,
    input_tokens,
    cache_read_tokens,
    usage_reported,
    previous_cache_read_tokens
FROM measured;
