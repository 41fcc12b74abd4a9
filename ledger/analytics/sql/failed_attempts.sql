-- failed_attempts: failed attempts (status = 'error') per (provider,
-- requested_model, error_type), each one a reason a call fell back or failed.
--
--   attempts = failed attempts in the group
--   cost_usd = their known costs (usually none: a refused request is not billed)
-- Summed from attempt_groups; a group's cost_usd is NULL when none of its rows
-- has a known cost, so the sum is NULL exactly when sum() over the rows is.
CREATE OR REPLACE VIEW failed_attempts AS
SELECT
    provider,
    requested_model,
    error_type,
    CAST(sum(rows) AS BIGINT) AS attempts,
    sum(cost_usd) AS cost_usd
FROM attempt_groups
WHERE status = 'error'
GROUP BY provider, requested_model, error_type;
