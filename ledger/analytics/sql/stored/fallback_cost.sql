-- fallback_cost, as stored in the analytics file: the same rows and columns as
-- sql/fallback_cost.sql. The calls that fell back are found where they are: the
-- one-row calls answered by an attempt after the first (their row, by a filter
-- the Parquet and DuckDB scans apply to two columns), and the calls of several
-- rows in state_calls, each projected as sql/stored/calls.sql projects it. Their
-- failed attempts are read for those calls only (the definition groups every
-- failed row by call first: millions of calls at scale, when a few fell back).
CREATE OR REPLACE VIEW fallback_cost AS
WITH fell AS (
    SELECT
        call_id,
        requested_provider,
        provider AS responding_provider,
        requested_model,
        CAST(cost_usd AS DECIMAL(38, 10)) AS cost_usd
    FROM token_usage AS t
    WHERE status = 'ok' AND attempt > 1
        AND NOT EXISTS (SELECT 1 FROM state_calls AS m WHERE m.call_id = t.call_id)
    UNION ALL
    SELECT call_id, requested_provider, responding_provider, requested_model, cost_usd
    FROM state_calls
    WHERE max_ok_attempt > 1
)
SELECT
    c.requested_provider,
    c.responding_provider,
    c.requested_model,
    count(*) AS fallback_calls,
    sum(c.cost_usd) AS cost_usd,
    sum(f.failed_cost_usd) AS failed_attempts_cost_usd,
    CAST(coalesce(sum(f.failed_attempts), 0) AS BIGINT) AS failed_attempts
FROM fell AS c
LEFT JOIN (
    SELECT call_id, count(*) AS failed_attempts, sum(cost_usd) AS failed_cost_usd
    FROM token_usage
    WHERE status = 'error' AND call_id IN (SELECT call_id FROM fell)
    GROUP BY call_id
) AS f USING (call_id)
GROUP BY c.requested_provider, c.responding_provider, c.requested_model;
