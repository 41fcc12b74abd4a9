-- cache_economics: one row per (actor_id, requested_model, provider, upstream identity
-- as column upstream) with served attempts: what prompt caching cost and saved.
--
-- Served attempts only (status 'ok', not a response-cache hit). A write's lifetime is
-- its TTL: 1 hour for the tokens usage_details reports as cache_write.ttl_1h
-- (Anthropic's cache_creation.ephemeral_1h_input_tokens), 5 minutes for the rest.
--
-- A write is *read* when the next served attempt of the same session (session_id,
-- actor_id, requested_model) on the same upstream identity, within the write's TTL,
-- reads more than the attempt that wrote it did: the new prefix it wrote is what
-- the next one can read beyond the old one,
--   written_read = least(written, greatest(0, next.cache_read_tokens - cache_read_tokens))
-- the 1-hour part first (Anthropic puts 1-hour breakpoints before 5-minute ones),
-- the 5-minute part only when the next attempt came within 5 minutes. A session's
-- last write on an upstream is never read by it. A prefix other sessions share
-- (a common system prompt) counts as read only by its own session: the share is a
-- lower bound there. Rows without session_id cannot be followed: their writes are
-- unattributed_write_tokens, in neither the read nor the unread figures.
--
-- Dollars at the rates of cache_rates (list prices of the table the client prices
-- with, per provider and requested model; NULL when unpriced), per million tokens:
-- input, cache read, 5-minute and 1-hour write.
--
--   calls                   = served attempts
--   cache_read_tokens,
--   cache_write_tokens,
--   cache_write_1h_tokens   = their sums (the 1-hour writes are a subset of the writes)
--   written_read_tokens     = written tokens later read (above)
--   written_read_share      = written_read_tokens / the attributed written tokens
--   unread_write_tokens     = attributed written tokens never read within their TTL
--   unread_write_cost_usd   = what writing those cost above sending them uncached:
--                             5-minute ones at (write - input), 1-hour at (write_1h - input)
--   write_premium_usd       = the same premium over every write
--   read_saving_usd         = cache_read_tokens * (input - cache read)
--   net_effect_usd          = write_premium_usd - read_saving_usd: what caching changed
--                             the bill by (negative = it saved money)
--   unattributed_write_tokens = writes of attempts without session_id
CREATE OR REPLACE VIEW cache_economics AS
WITH served AS (
    SELECT
        id,
        session_id,
        actor_id,
        requested_model,
        provider,
        coalesce(upstream, provider) AS upstream,
        started_at,
        attempt,
        cache_read_tokens,
        cache_write_tokens,
        CASE WHEN cache_write_tokens > 0 THEN least(cache_write_tokens, coalesce(
            CAST(json_extract_string(usage_details, '$.cache_write.ttl_1h') AS BIGINT), 0))
            ELSE 0 END AS cache_write_1h_tokens
    FROM token_usage
    WHERE status = 'ok' AND NOT response_cache_hit
),
followed AS (
    SELECT
        *,
        lead(cache_read_tokens) OVER w AS next_read_tokens,
        lead(started_at) OVER w AS next_started_at
    FROM served
    WHERE session_id IS NOT NULL
    WINDOW w AS (
        PARTITION BY session_id, actor_id, requested_model, upstream
        ORDER BY started_at, attempt, id
    )
),
read_later AS (
    SELECT
        *,
        CASE WHEN next_started_at IS NULL THEN 0
            ELSE greatest(0, next_read_tokens - cache_read_tokens) END AS new_read,
        (epoch_us(next_started_at) - epoch_us(started_at)) / 1e6 AS next_gap_s
    FROM followed
    WHERE cache_write_tokens > 0
),
attributed AS (
    SELECT
        *,
        CASE WHEN next_gap_s <= 3600 THEN least(cache_write_1h_tokens, new_read) ELSE 0 END
            AS read_1h
    FROM read_later
),
writes AS (
    SELECT
        actor_id,
        requested_model,
        provider,
        upstream,
        sum(cache_write_tokens - cache_write_1h_tokens) AS attributed_5m,
        sum(cache_write_1h_tokens) AS attributed_1h,
        sum(read_1h) AS read_1h,
        sum(CASE WHEN next_gap_s <= 300
            THEN least(cache_write_tokens - cache_write_1h_tokens, new_read - read_1h)
            ELSE 0 END) AS read_5m
    FROM attributed
    GROUP BY actor_id, requested_model, provider, upstream
),
totals AS (
    SELECT
        actor_id,
        requested_model,
        provider,
        upstream,
        count(*) AS calls,
        CAST(sum(cache_read_tokens) AS BIGINT) AS cache_read_tokens,
        CAST(sum(cache_write_tokens) AS BIGINT) AS cache_write_tokens,
        CAST(sum(cache_write_1h_tokens) AS BIGINT) AS cache_write_1h_tokens,
        CAST(coalesce(sum(cache_write_tokens) FILTER (WHERE session_id IS NULL), 0) AS BIGINT)
            AS unattributed_write_tokens
    FROM served
    GROUP BY actor_id, requested_model, provider, upstream
),
joined AS (
    SELECT
        t.*,
        coalesce(w.attributed_5m, 0) AS attributed_5m,
        coalesce(w.attributed_1h, 0) AS attributed_1h,
        coalesce(w.read_5m, 0) AS read_5m,
        coalesce(w.read_1h, 0) AS read_1h,
        r.input_mtok,
        r.cache_read_mtok,
        r.cache_write_mtok,
        r.cache_write_1h_mtok
    FROM totals AS t
    LEFT JOIN writes AS w
        ON w.actor_id IS NOT DISTINCT FROM t.actor_id
        AND w.requested_model = t.requested_model
        AND w.provider = t.provider
        AND w.upstream = t.upstream
    LEFT JOIN cache_rates AS r
        ON r.provider = t.provider AND r.requested_model = t.requested_model
)
SELECT
    actor_id,
    requested_model,
    provider,
    upstream,
    calls,
    cache_read_tokens,
    cache_write_tokens,
    cache_write_1h_tokens,
    CAST(read_5m + read_1h AS BIGINT) AS written_read_tokens,
    CAST(read_5m + read_1h AS DOUBLE) / nullif(attributed_5m + attributed_1h, 0)
        AS written_read_share,
    CAST(attributed_5m + attributed_1h - read_5m - read_1h AS BIGINT) AS unread_write_tokens,
    CAST(((attributed_5m - read_5m) * (cache_write_mtok - input_mtok)
        + (attributed_1h - read_1h) * (cache_write_1h_mtok - input_mtok)) / 1000000
        AS DECIMAL(20, 10)) AS unread_write_cost_usd,
    CAST(((cache_write_tokens - cache_write_1h_tokens) * (cache_write_mtok - input_mtok)
        + cache_write_1h_tokens * (cache_write_1h_mtok - input_mtok)) / 1000000
        AS DECIMAL(20, 10)) AS write_premium_usd,
    CAST(cache_read_tokens * (input_mtok - cache_read_mtok) / 1000000 AS DECIMAL(20, 10))
        AS read_saving_usd,
    CAST(((cache_write_tokens - cache_write_1h_tokens) * (cache_write_mtok - input_mtok)
        + cache_write_1h_tokens * (cache_write_1h_mtok - input_mtok)
        - cache_read_tokens * (input_mtok - cache_read_mtok)) / 1000000
        AS DECIMAL(20, 10)) AS net_effect_usd,
    unattributed_write_tokens
FROM joined;
