-- switch_costs: one row per (requested_model, actor_id, day) with switches or idle
-- releases: what stickiness failures cost in prompt-cache reads.
--
-- For each transition (see transitions) whose upstream identity changed, the
-- later attempt is the first call after the move; the prompt tokens it lost
-- are those read from the cache on the previous call and not on this one:
--   tokens_lost = greatest(0, least(previous_cache_read_tokens, input_tokens)
--                              - cache_read_tokens)
-- priced with the model's cache discount (model_prices.discount_per_mtok: the
-- list price of a million uncached input tokens minus their price as cache
-- reads, from genai-prices, for the provider that served most of the model's
-- attempts; null when unpriced, so cost_usd is null, never 0). The counts come
-- from switch_counts (switch_moves summed per model, agent and day).
--
--   day                   = UTC date of the later attempt
--   switches              = moves within the idle window (is_switch)
--   idle_releases         = moves past it (is_idle_release: the pin had expired)
--   switch_tokens_lost,
--   release_tokens_lost   = tokens_lost after each kind
--   cache_read_tokens_lost = their sum
--   switch_cost_usd,
--   cost_usd              = switch_tokens_lost, and all tokens lost, priced
CREATE OR REPLACE VIEW switch_costs AS
SELECT
    s.requested_model,
    s.actor_id,
    DATE '1970-01-01' + CAST(s.day_number AS INTEGER) AS day,
    s.switches,
    s.idle_releases,
    s.switch_tokens_lost,
    s.release_tokens_lost,
    s.switch_tokens_lost + s.release_tokens_lost AS cache_read_tokens_lost,
    CAST(s.switch_tokens_lost * p.discount_per_mtok / 1000000 AS DECIMAL(20, 10))
        AS switch_cost_usd,
    CAST((s.switch_tokens_lost + s.release_tokens_lost) * p.discount_per_mtok / 1000000
        AS DECIMAL(20, 10)) AS cost_usd
FROM switch_counts AS s
LEFT JOIN model_prices AS p USING (requested_model);
