-- openrouter_upstreams, as stored in the analytics file: the same rows and
-- columns as views/openrouter_upstreams.sql, summed from state_rollup.
CREATE OR REPLACE VIEW openrouter_upstreams AS
SELECT
    requested_model,
    upstream,
    CAST(sum(rows) AS BIGINT) AS attempts,
    CAST(coalesce(sum(rows) FILTER (WHERE status = 'error'), 0) AS BIGINT) AS errors
FROM state_rollup
WHERE is_attempt AND provider = 'openrouter'
GROUP BY requested_model, upstream;
