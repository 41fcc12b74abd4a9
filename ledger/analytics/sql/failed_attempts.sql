-- failed_attempts: failed attempts (status = 'error') per (provider,
-- requested_model, error_type), each one a reason a call fell back or failed.
--
--   attempts = failed attempts in the group
--   cost_usd = their known costs (usually none: a refused request is not billed)
CREATE OR REPLACE VIEW failed_attempts AS
SELECT
    provider,
    requested_model,
    error_type,
    count(*) AS attempts,
    sum(cost_usd) AS cost_usd
FROM token_usage
WHERE status = 'error'
GROUP BY provider, requested_model, error_type;
