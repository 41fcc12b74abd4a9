-- switch_moves: one row per switch or idle release (a transition whose upstream
-- identity changed, see transitions), with what the first call after it lost.
-- A helper of switch_costs and provider_order_verdict (formulas in switch_costs.sql).
--
--   day_number  = the later attempt's UTC day, as days since 1970-01-01
--   is_switch   = within the idle window (else an idle release)
--   tokens_lost = greatest(0, least(previous_cache_read_tokens, input_tokens)
--                 - cache_read_tokens); 0 when the later attempt's usage was not
--                 reported (its counts are unknown, not zero); 0 when the later attempt's usage was not
--                 reported (its counts are unknown, not zero)
CREATE OR REPLACE VIEW switch_moves AS
SELECT
    requested_model,
    actor_id,
    -- the UTC day as a number (grouping on it is far cheaper than on a date)
    epoch_us(started_at) // 86400000000 AS day_number,
    gap_s <= ledger_setting('idle_window_s') AS is_switch,
    CASE WHEN usage_reported THEN greatest(0,
        least(coalesce(previous_cache_read_tokens, 0), coalesce(input_tokens, 0))
            - coalesce(cache_read_tokens, 0)) ELSE 0 END AS tokens_lost
FROM transitions
-- a switch or an idle release (is_switch / is_idle_release): the identity changed
WHERE upstream <> previous_upstream;
