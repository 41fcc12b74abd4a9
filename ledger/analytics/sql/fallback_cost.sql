-- fallback_cost: what the calls answered after a fallback cost, one row per
-- (requested_provider, responding_provider, requested_model), over the calls
-- view and their failed attempts.
--
--   fallback_calls           = calls with fell_back
--   cost_usd                 = their known costs, every attempt included
--   failed_attempts          = their attempts with status = 'error'
--   failed_attempts_cost_usd = the known costs of those failed attempts
CREATE OR REPLACE VIEW fallback_cost AS
SELECT
    c.requested_provider,
    c.responding_provider,
    c.requested_model,
    count(*) AS fallback_calls,
    sum(c.cost_usd) AS cost_usd,
    sum(f.failed_cost_usd) AS failed_attempts_cost_usd,
    CAST(coalesce(sum(f.failed_attempts), 0) AS BIGINT) AS failed_attempts
FROM calls AS c
LEFT JOIN (
    SELECT call_id, count(*) AS failed_attempts, sum(cost_usd) AS failed_cost_usd
    FROM token_usage
    WHERE status = 'error'
    GROUP BY call_id
) AS f USING (call_id)
WHERE c.fell_back
GROUP BY c.requested_provider, c.responding_provider, c.requested_model;
