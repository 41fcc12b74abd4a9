-- prompt_cache_reads: cache-read tokens of served attempts per (provider,
-- model), model being the one served (else the one requested): what the
-- prompt cache's savings are priced from (Analytics.prompt_cache_saving).
CREATE OR REPLACE VIEW prompt_cache_reads AS
SELECT
    provider,
    coalesce(model, requested_model) AS model,
    CAST(sum(cache_read_tokens) AS BIGINT) AS cache_read_tokens
FROM token_usage
WHERE status = 'ok' AND NOT response_cache_hit AND cache_read_tokens > 0
GROUP BY provider, coalesce(model, requested_model);
