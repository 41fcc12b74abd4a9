-- attempt_groups: an intermediate, not a metric. The rows counted and their
-- tokens and costs summed per group of the columns the metrics filter and
-- split by: agent, model, provider, upstream, key sent, outcome, cache flags,
-- served model and error type. cache_hits, failed_attempts, keyless_hit_rates,
-- openrouter_upstreams, overview_totals and prompt_cache_reads are sums over
-- it, so each is one text whether it reads all rows or a filtered few.
--
-- materialized: state_rollup
-- Over every row, the view reads state_rollup, which sync keeps by folding
-- this very text over the new rows and adding the sums (removed rows' sums
-- subtracted): ledger/analytics/state/rollup.py. A filtered read runs the
-- text over the filtered rows.
--
--   key_sent            = session_key IS NOT NULL (row level)
--   is_attempt          = attempt >= 1 (0: served from the response cache)
--   abandoned           = error_type 'abandoned': the caller left, no upstream failed
--   rows                = rows in the group
--   input_tokens, cache_read_tokens, cache_write_tokens = their sums
--   read_rows           = rows with cache_read_tokens > 0
--   latency_rows        = rows with a latency_ms
--   cost_usd            = sum of the known costs (null when none is known)
--   costed_input_tokens = input tokens of the rows with a known cost
--   cost_rows           = rows with a known cost
CREATE OR REPLACE VIEW attempt_groups AS
SELECT
    actor_id,
    requested_model,
    provider,
    upstream,
    key_sent,
    status,
    response_cache_hit,
    is_attempt,
    usage_reported,
    abandoned,
    model,
    error_type,
    count(*) AS rows,
    CAST(sum(input_tokens) AS BIGINT) AS input_tokens,
    CAST(sum(cache_read_tokens) AS BIGINT) AS cache_read_tokens,
    CAST(sum(cache_write_tokens) AS BIGINT) AS cache_write_tokens,
    count(*) FILTER (WHERE cache_read_tokens > 0) AS read_rows,
    count(latency_ms) AS latency_rows,
    sum(cost_usd) AS cost_usd,
    CAST(coalesce(sum(input_tokens) FILTER (WHERE cost_usd IS NOT NULL), 0) AS BIGINT)
        AS costed_input_tokens,
    count(cost_usd) AS cost_rows
FROM (
    SELECT
        *,
        session_key IS NOT NULL AS key_sent,
        attempt >= 1 AS is_attempt,
        coalesce(error_type = 'abandoned', false) AS abandoned
    FROM token_usage
)
GROUP BY
    actor_id, requested_model, provider, upstream, key_sent, status, response_cache_hit,
    is_attempt, usage_reported, abandoned, model, error_type;
