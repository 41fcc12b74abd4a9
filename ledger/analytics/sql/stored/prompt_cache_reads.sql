-- prompt_cache_reads, as stored in the analytics file: the same rows and
-- columns as sql/prompt_cache_reads.sql, summed from state_rollup (its groups
-- keep the served model). A group's cache_read_tokens sums rows that read
-- nothing too, which add 0; read_rows (rows with cache_read_tokens > 0) says
-- whether the group has a row the definition keeps.
CREATE OR REPLACE VIEW prompt_cache_reads AS
SELECT
    provider,
    coalesce(model, requested_model) AS model,
    CAST(sum(cache_read_tokens) AS BIGINT) AS cache_read_tokens
FROM state_rollup
WHERE status = 'ok' AND NOT response_cache_hit AND read_rows > 0
GROUP BY provider, coalesce(model, requested_model);
