-- cache_ttl_advice: one row per (actor_id, requested_model, provider) with served
-- attempts in sessions: the cache lifetime to write with (Anthropic's 5-minute or
-- 1-hour cache_control, also through OpenRouter), or none, from the agent's idle gaps.
--
-- A turn is a served attempt with session_id; its *prefix* is what it read from or
-- wrote to the cache (cache_read_tokens + cache_write_tokens). Consecutive turns of a
-- session (session_id, actor_id, requested_model, ordered by started_at, attempt, id)
-- share a prefix when the later one reuses the earlier one's; how much they share is
-- measured where the cache was live (same upstream identity, gap within the TTL the
-- agent writes with now):
--   prefix_reuse = sum(least(cache_read_tokens, previous prefix)) / sum(previous prefix)
-- over those transitions (reuse_observed); an agent with none (every gap past its TTL)
-- is taken to extend its previous turn, as a conversation does (prefix_reuse 1,
-- reuse_observed false: the advice says so).
--
-- Each turn is then priced under each setting, from its prefix P, the previous turn's
-- Q, their gap g and the rates of cache_rates (per million tokens):
--   none : P * input
--   5m   : shared S = least(prefix_reuse * Q, P); when the previous turn was on the same
--          upstream and g <= 300 s, S * read + (P - S) * write_5m, else P * write_5m
--   1h   : the same with g <= 3600 s and write_1h
-- (a session's first turn writes its whole prefix). The tokens outside the prefix cost
-- the same under every setting and are left out.
--
-- Intervals are session-clustered: turns of one session are not independent draws. For
-- a setting x with per-session sums x_s over n_s turns, N turns in n sessions, the mean
-- per turn r = sum(x_s) / N has variance n/(n-1) * sum((x_s - r n_s)^2) / N^2 (the
-- ratio estimator's linearisation); the interval is r +- z sd, z =
-- ledger_setting('confidence_z'). The effect of switching uses the same formula on the
-- per-session differences best_s - current_s.
--
-- Traffic: calls_per_day = turns in the last 30 days of the rows read (up to the last
-- one, ledger_span.last_at) / those days (the ledger's span when shorter, at least an
-- hour); a monthly figure is a per-turn figure * calls_per_day * 30.
--
--   sessions, calls          = sessions and turns
--   current_ttl              = '1h' when most written tokens had a 1-hour TTL, else '5m';
--                              NULL when the agent writes nothing
--   gap_p50_s                = median gap between consecutive turns on the same upstream
--   within_5m_share,
--   within_1h_share          = share of those gaps <= 300 s, <= 3600 s
--   prefix_reuse, reuse_observed = above
--   none_monthly_usd, ttl_5m_monthly_usd, ttl_1h_monthly_usd (+ _low_usd, _high_usd) =
--                              the prefix's projected cost per 30 days under each setting
--   best_ttl                 = the cheapest projection ('none', '5m', '1h'; ties keep
--                              the current one)
--   monthly_effect_usd (+ _low_usd, _high_usd) = best minus current per 30 days
--                              (negative = saving)
--   verdict                  = 'switch' (best differs from current and the whole
--                              interval of the effect is a saving), 'keep' (the current
--                              setting is the cheapest), 'inconclusive' (a cheaper one
--                              whose interval reaches 0), 'insufficient_data' (fewer than
--                              ledger_setting('min_samples') turns, fewer than 2
--                              sessions, no prefix cached, or no rates), 'does_not_apply'
--                              (no cache write premium: OpenAI's automatic caching)
--   setting                  = for 'switch', the cache_control to put on the last block
--                              the turns share, or 'remove cache_control'; NULL otherwise
--   headline, reason         = one line, and the figures behind it
CREATE OR REPLACE VIEW cache_ttl_advice AS
WITH turns AS (
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
        cache_read_tokens + cache_write_tokens AS prefix,
        cache_write_tokens,
        CASE WHEN cache_write_tokens > 0 THEN least(cache_write_tokens, coalesce(
            CAST(json_extract_string(usage_details, '$.cache_write.ttl_1h') AS BIGINT), 0))
            ELSE 0 END AS cache_write_1h_tokens
    FROM token_usage
    WHERE status = 'ok' AND NOT response_cache_hit AND session_id IS NOT NULL
),
paired AS (
    SELECT
        *,
        lag(prefix) OVER w AS previous_prefix,
        lag(upstream) OVER w AS previous_upstream,
        (epoch_us(started_at) - epoch_us(lag(started_at) OVER w)) / 1e6 AS gap_s
    FROM turns
    WINDOW w AS (PARTITION BY session_id, actor_id, requested_model ORDER BY started_at, attempt, id)
),
agents AS (
    SELECT
        actor_id,
        requested_model,
        provider,
        count(*) AS calls,
        count(DISTINCT session_id) AS sessions,
        sum(prefix) AS prefix_tokens,
        CASE WHEN sum(cache_write_tokens) = 0 THEN NULL
            WHEN 2 * sum(cache_write_1h_tokens) > sum(cache_write_tokens) THEN '1h'
            ELSE '5m' END AS current_ttl,
        quantile_cont(gap_s, 0.5) FILTER (WHERE upstream = previous_upstream) AS gap_p50_s,
        avg(CASE WHEN gap_s <= 300 THEN CAST(1 AS DOUBLE) ELSE CAST(0 AS DOUBLE) END)
            FILTER (WHERE upstream = previous_upstream) AS within_5m_share,
        avg(CASE WHEN gap_s <= 3600 THEN CAST(1 AS DOUBLE) ELSE CAST(0 AS DOUBLE) END)
            FILTER (WHERE upstream = previous_upstream) AS within_1h_share
    FROM paired
    GROUP BY actor_id, requested_model, provider
),
reuse AS (
    SELECT
        p.actor_id,
        p.requested_model,
        p.provider,
        sum(least(p.cache_read_tokens, p.previous_prefix)) AS reused,
        sum(p.previous_prefix) AS offered
    FROM paired AS p
    JOIN agents AS a
        ON a.actor_id IS NOT DISTINCT FROM p.actor_id
        AND a.requested_model = p.requested_model
        AND a.provider = p.provider
    WHERE p.previous_prefix > 0 AND p.upstream = p.previous_upstream
        AND p.gap_s <= CASE WHEN a.current_ttl = '1h' THEN 3600 ELSE 300 END
    GROUP BY p.actor_id, p.requested_model, p.provider
),
priced AS (
    SELECT
        a.*,
        coalesce(CAST(u.reused AS DOUBLE) / nullif(u.offered, 0), 1.0) AS prefix_reuse,
        coalesce(u.offered, 0) > 0 AS reuse_observed,
        CAST(r.input_mtok AS DOUBLE) AS input_mtok,
        CAST(r.cache_read_mtok AS DOUBLE) AS read_mtok,
        CAST(r.cache_write_mtok AS DOUBLE) AS write_5m_mtok,
        CAST(r.cache_write_1h_mtok AS DOUBLE) AS write_1h_mtok
    FROM agents AS a
    LEFT JOIN reuse AS u
        ON u.actor_id IS NOT DISTINCT FROM a.actor_id
        AND u.requested_model = a.requested_model
        AND u.provider = a.provider
    LEFT JOIN cache_rates AS r
        ON r.provider = a.provider AND r.requested_model = a.requested_model
),
projected AS (
    SELECT
        p.session_id,
        p.actor_id,
        p.requested_model,
        p.provider,
        p.started_at,
        p.prefix * g.input_mtok AS cost_none,
        CASE WHEN p.upstream = p.previous_upstream AND p.gap_s <= 300
            THEN least(g.prefix_reuse * p.previous_prefix, p.prefix) * g.read_mtok
                + (p.prefix - least(g.prefix_reuse * p.previous_prefix, p.prefix))
                * g.write_5m_mtok
            ELSE p.prefix * g.write_5m_mtok END AS cost_5m,
        CASE WHEN p.upstream = p.previous_upstream AND p.gap_s <= 3600
            THEN least(g.prefix_reuse * p.previous_prefix, p.prefix) * g.read_mtok
                + (p.prefix - least(g.prefix_reuse * p.previous_prefix, p.prefix))
                * g.write_1h_mtok
            ELSE p.prefix * g.write_1h_mtok END AS cost_1h
    FROM paired AS p
    JOIN priced AS g
        ON g.actor_id IS NOT DISTINCT FROM p.actor_id
        AND g.requested_model = p.requested_model
        AND g.provider = p.provider
    WHERE g.write_5m_mtok > g.input_mtok
),
per_session AS (
    SELECT
        actor_id,
        requested_model,
        provider,
        count(*) AS n,
        sum(cost_none) AS cost_none,
        sum(cost_5m) AS cost_5m,
        sum(cost_1h) AS cost_1h
    FROM projected
    GROUP BY session_id, actor_id, requested_model, provider
),
means AS (
    SELECT
        s.actor_id,
        s.requested_model,
        s.provider,
        sum(s.n) AS turns,
        sum(s.cost_none) / sum(s.n) AS r_none,
        sum(s.cost_5m) / sum(s.n) AS r_5m,
        sum(s.cost_1h) / sum(s.n) AS r_1h
    FROM per_session AS s
    GROUP BY s.actor_id, s.requested_model, s.provider
),
chosen AS (
    SELECT
        m.*,
        a.current_ttl,
        CASE
            WHEN a.current_ttl = '1h' AND m.r_1h <= least(m.r_none, m.r_5m) THEN '1h'
            WHEN a.current_ttl = '5m' AND m.r_5m <= least(m.r_none, m.r_1h) THEN '5m'
            WHEN m.r_none <= least(m.r_5m, m.r_1h) THEN 'none'
            WHEN m.r_5m <= m.r_1h THEN '5m'
            ELSE '1h'
        END AS best_ttl
    FROM means AS m
    JOIN agents AS a
        ON a.actor_id IS NOT DISTINCT FROM m.actor_id
        AND a.requested_model = m.requested_model
        AND a.provider = m.provider
),
spread AS (
    SELECT
        c.actor_id,
        c.requested_model,
        c.provider,
        count(*) AS n_sessions,
        sum(power(s.cost_none - c.r_none * s.n, 2)) AS ss_none,
        sum(power(s.cost_5m - c.r_5m * s.n, 2)) AS ss_5m,
        sum(power(s.cost_1h - c.r_1h * s.n, 2)) AS ss_1h,
        sum(power(
            ([s.cost_none, s.cost_5m, s.cost_1h][CASE c.best_ttl WHEN 'none' THEN 1
                WHEN '5m' THEN 2 ELSE 3 END]
            - [s.cost_none, s.cost_5m, s.cost_1h][CASE c.current_ttl WHEN '5m' THEN 2
                ELSE 3 END])
            - ([c.r_none, c.r_5m, c.r_1h][CASE c.best_ttl WHEN 'none' THEN 1
                WHEN '5m' THEN 2 ELSE 3 END]
            - [c.r_none, c.r_5m, c.r_1h][CASE c.current_ttl WHEN '5m' THEN 2 ELSE 3 END])
            * s.n, 2)) AS ss_effect
    FROM chosen AS c
    JOIN per_session AS s
        ON s.actor_id IS NOT DISTINCT FROM c.actor_id
        AND s.requested_model = c.requested_model
        AND s.provider = c.provider
    GROUP BY c.actor_id, c.requested_model, c.provider
),
span AS (
    SELECT
        last_at,
        least(30.0, greatest((epoch_us(last_at) - epoch_us(first_at)) / 86400e6, 1.0 / 24))
            AS recent_days
    FROM ledger_span
),
recent AS (
    SELECT t.actor_id, t.requested_model, t.provider, count(*) / min(s.recent_days) AS calls_per_day
    FROM turns AS t, span AS s
    WHERE epoch_us(t.started_at) >= epoch_us(s.last_at) - s.recent_days * 86400e6
    GROUP BY t.actor_id, t.requested_model, t.provider
),
scaled AS (
    SELECT
        c.*,
        sp.n_sessions,
        -- USD per turn from USD per million tokens, then per 30 days at recent traffic
        coalesce(rc.calls_per_day, 0) * 30 / 1000000 AS month,
        (SELECT ledger_setting('confidence_z')) * sqrt(sp.n_sessions / nullif(sp.n_sessions - 1, 0))
            / c.turns AS zse,
        sp.ss_none,
        sp.ss_5m,
        sp.ss_1h,
        sp.ss_effect,
        [c.r_none, c.r_5m, c.r_1h][CASE c.best_ttl WHEN 'none' THEN 1 WHEN '5m' THEN 2 ELSE 3 END]
            - [c.r_none, c.r_5m, c.r_1h][CASE c.current_ttl WHEN '5m' THEN 2 ELSE 3 END]
            AS r_effect,
        rc.calls_per_day
    FROM chosen AS c
    JOIN spread AS sp
        ON sp.actor_id IS NOT DISTINCT FROM c.actor_id
        AND sp.requested_model = c.requested_model
        AND sp.provider = c.provider
    LEFT JOIN recent AS rc
        ON rc.actor_id IS NOT DISTINCT FROM c.actor_id
        AND rc.requested_model = c.requested_model
        AND rc.provider = c.provider
),
judged AS (
    SELECT
        a.actor_id,
        a.requested_model,
        a.provider,
        a.sessions,
        a.calls,
        a.current_ttl,
        a.gap_p50_s,
        a.within_5m_share,
        a.within_1h_share,
        a.prefix_reuse,
        a.reuse_observed,
        x.calls_per_day,
        x.r_none * x.month AS none_monthly_usd,
        (x.r_none - x.zse * sqrt(x.ss_none)) * x.month AS none_monthly_low_usd,
        (x.r_none + x.zse * sqrt(x.ss_none)) * x.month AS none_monthly_high_usd,
        x.r_5m * x.month AS ttl_5m_monthly_usd,
        (x.r_5m - x.zse * sqrt(x.ss_5m)) * x.month AS ttl_5m_monthly_low_usd,
        (x.r_5m + x.zse * sqrt(x.ss_5m)) * x.month AS ttl_5m_monthly_high_usd,
        x.r_1h * x.month AS ttl_1h_monthly_usd,
        (x.r_1h - x.zse * sqrt(x.ss_1h)) * x.month AS ttl_1h_monthly_low_usd,
        (x.r_1h + x.zse * sqrt(x.ss_1h)) * x.month AS ttl_1h_monthly_high_usd,
        x.best_ttl,
        x.r_effect * x.month AS monthly_effect_usd,
        (x.r_effect - x.zse * sqrt(x.ss_effect)) * x.month AS monthly_effect_low_usd,
        (x.r_effect + x.zse * sqrt(x.ss_effect)) * x.month AS monthly_effect_high_usd,
        CASE
            WHEN a.input_mtok IS NULL OR a.write_5m_mtok IS NULL OR a.read_mtok IS NULL
                THEN 'insufficient_data'
            WHEN a.write_5m_mtok <= a.input_mtok THEN 'does_not_apply'
            WHEN a.current_ttl IS NULL OR a.prefix_tokens = 0 OR a.sessions < 2
                OR a.calls < ledger_setting('min_samples') THEN 'insufficient_data'
            WHEN x.best_ttl = a.current_ttl THEN 'keep'
            WHEN x.r_effect + x.zse * sqrt(x.ss_effect) < 0 THEN 'switch'
            ELSE 'inconclusive'
        END AS verdict
    FROM priced AS a
    LEFT JOIN scaled AS x
        ON x.actor_id IS NOT DISTINCT FROM a.actor_id
        AND x.requested_model = a.requested_model
        AND x.provider = a.provider
)
SELECT
    j.*,
    CASE WHEN verdict <> 'switch' THEN NULL
        WHEN best_ttl = '1h' THEN 'cache_control: {"type": "ephemeral", "ttl": "1h"}'
        WHEN best_ttl = '5m' THEN 'cache_control: {"type": "ephemeral"}'
        ELSE 'remove cache_control' END AS setting,
    CASE verdict
        WHEN 'switch' THEN printf('switch to %s: %s$%.2f per 30 days (%.2f to %.2f)',
            CASE best_ttl WHEN 'none' THEN 'no caching' ELSE best_ttl || ' writes' END,
            CASE WHEN monthly_effect_usd < 0 THEN '-' ELSE '+' END, abs(monthly_effect_usd),
            monthly_effect_low_usd, monthly_effect_high_usd)
        WHEN 'keep' THEN printf('keep %s writes: the cheapest of the three', current_ttl)
        WHEN 'inconclusive' THEN printf('%s looks cheaper, within the noise',
            CASE best_ttl WHEN 'none' THEN 'no caching' ELSE best_ttl || ' writes' END)
        WHEN 'does_not_apply' THEN 'no cache write premium: nothing to choose'
        ELSE 'not enough cached turns to judge'
    END AS headline,
    CASE WHEN none_monthly_usd IS NULL THEN NULL
        ELSE printf('per 30 days at %.1f calls/day: none $%.2f, 5m $%.2f, 1h $%.2f; median gap %.0f s, %.0f%% within 5 min, %.0f%% within 1 h; prefix reuse %.0f%%%s',
            calls_per_day, none_monthly_usd, ttl_5m_monthly_usd, ttl_1h_monthly_usd,
            coalesce(gap_p50_s, 0), 100 * coalesce(within_5m_share, 0),
            100 * coalesce(within_1h_share, 0), 100 * prefix_reuse,
            CASE WHEN reuse_observed THEN '' ELSE ' (assumed: no turn came while the cache was live)' END)
    END AS reason
FROM judged AS j;
