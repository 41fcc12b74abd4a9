-- prompt_cache_reads: cache-read tokens of served attempts per (provider,
-- model), model being the one served (else the one requested): what the
-- prompt cache's savings are priced from (Analytics.prompt_cache_saving).
-- Summed from attempt_groups: a group's cache_read_tokens sums rows that read
-- nothing too, which add 0; read_rows (rows with cache_read_tokens > 0) says
-- whether the group has a row that read from the cache.
CREATE OR REPLACE VIEW prompt_cache_reads AS
SELECT
    provider,
    coalesce(model, requested_model) AS model,
    CAST(sum(cache_read_tokens) AS BIGINT) AS cache_read_tokens
FROM attempt_groups
WHERE status = 'ok' AND NOT response_cache_hit AND read_rows > 0
GROUP BY provider, coalesce(model, requested_model);
