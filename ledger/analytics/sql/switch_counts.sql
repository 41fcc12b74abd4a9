-- switch_counts: one row per (requested_model, actor_id, day_number) with
-- switches or idle releases (switch_moves summed). A helper of switch_costs
-- and provider_order_verdict; its stored variant reads state_moves, so neither
-- reads one row per transition.
--
--   switches              = moves within the idle window (is_switch)
--   idle_releases         = moves past it
--   switch_tokens_lost,
--   release_tokens_lost   = tokens_lost after each kind
CREATE OR REPLACE VIEW switch_counts AS
SELECT
    requested_model,
    actor_id,
    day_number,
    count(*) FILTER (WHERE is_switch) AS switches,
    count(*) FILTER (WHERE NOT is_switch) AS idle_releases,
    CAST(coalesce(sum(tokens_lost) FILTER (WHERE is_switch), 0) AS BIGINT)
        AS switch_tokens_lost,
    CAST(coalesce(sum(tokens_lost) FILTER (WHERE NOT is_switch), 0) AS BIGINT)
        AS release_tokens_lost
FROM switch_moves
GROUP BY requested_model, actor_id, day_number;
