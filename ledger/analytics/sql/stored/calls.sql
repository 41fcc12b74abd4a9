-- calls, as stored in the analytics file: the same rows and columns as
-- views/calls.sql (which defines them over token_usage). Calls of several rows
-- come from the per-call aggregates sync keeps in state_calls; a call of one row
-- is its row, projected here as aggregates.py would aggregate it (state_calls
-- holds every call of several rows, so a row of no call there is a whole call).
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
FROM (
    SELECT
        call_id, started_at, session_id, actor_id, requested_provider, requested_model,
        CASE WHEN status = 'ok' THEN provider END AS responding_provider,
        CASE WHEN status = 'ok' THEN upstream END AS upstream,
        CAST(attempt >= 1 AS BIGINT) AS attempts,
        CASE WHEN status = 'ok' THEN attempt END AS max_ok_attempt,
        status = 'ok' AS any_ok,
        response_cache_hit,
        CAST(input_tokens AS BIGINT) AS input_tokens,
        CAST(output_tokens AS BIGINT) AS output_tokens,
        CAST(cache_read_tokens AS BIGINT) AS cache_read_tokens,
        CAST(cache_write_tokens AS BIGINT) AS cache_write_tokens,
        CAST(cost_usd AS DECIMAL(38, 10)) AS cost_usd,
        CAST(latency_ms AS DOUBLE) AS latency_ms,
        session_key IS NOT NULL AS key_sent
    FROM token_usage AS t
    WHERE NOT EXISTS (SELECT 1 FROM state_calls AS m WHERE m.call_id = t.call_id)
    UNION ALL
    -- the columns by name (not * EXCLUDE (ckey): Spark runs this text too, see ledger/lake/)
    SELECT
        call_id, started_at, session_id, actor_id, requested_provider, requested_model,
        responding_provider, upstream, attempts, max_ok_attempt, any_ok, response_cache_hit,
        input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd,
        latency_ms, key_sent
    FROM state_calls
);
