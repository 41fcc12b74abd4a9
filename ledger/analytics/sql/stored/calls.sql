-- calls, as stored in the analytics file: the same rows and columns as
-- views/calls.sql (which defines them over token_usage), read from the per-call
-- aggregates that sync keeps in state_calls (see ledger/analytics/aggregates.py).
CREATE OR REPLACE VIEW calls AS
SELECT
    call_id,
    started_at,
    session_id,
    actor_id,
    requested_provider,
    requested_model,
    responding_provider,
    upstream,
    attempts,
    coalesce(max_ok_attempt > 1, false) AS fell_back,
    CASE WHEN any_ok THEN 'ok' ELSE 'error' END AS status,
    response_cache_hit,
    input_tokens,
    output_tokens,
    cache_read_tokens,
    cache_write_tokens,
    cost_usd,
    latency_ms,
    key_sent
FROM state_calls;
