-- failed_attempts, as stored in the analytics file: the same rows and columns
-- as sql/failed_attempts.sql, summed from state_rollup (its groups keep
-- error_type). A group's cost_usd is NULL when none of its rows has a known
-- cost, so the sum is NULL exactly when sum() over the rows is.
CREATE OR REPLACE VIEW failed_attempts AS
SELECT
    provider,
    requested_model,
    error_type,
    CAST(sum(rows) AS BIGINT) AS attempts,
    sum(cost_usd) AS cost_usd
FROM state_rollup
WHERE status = 'error'
GROUP BY provider, requested_model, error_type;
