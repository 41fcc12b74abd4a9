-- verdict_figures: one row per requested_model, typed columns only. Should this
-- model's OpenRouter calls change routing (ADR 0221, decision 3), and if so, what
-- `provider` object should they send? The contract's view, provider_order_verdict,
-- is these columns plus the headline and reason that ledger.analytics.verdict_words
-- writes from them (in Python: no sentence is built here).
--
-- What each OpenRouter setting does (OpenRouterTeam/docs,
-- guides/routing/provider-selection.mdx and guides/best-practices/prompt-caching.mdx):
--   "If you have `sort` or `order` set in your provider preferences, load
--    balancing will be disabled."
--   order: "List of provider slugs to try in order [...] OpenRouter will try
--    them one at a time and proceed to other providers if none are operational.
--    If you don't want to allow any other providers, you should disable
--    fallbacks as well."  (allow_fallbacks, default true: "Whether to allow
--    backup providers when the primary is unavailable.")
--   ignore: "List of provider slugs to skip for this request."  only: "List of
--    provider slugs to allow for this request."
--   "Sticky routing is not used when you specify a manual provider order via
--    `provider.order` — in that case, your explicit ordering takes priority."
--   "Sticky sessions expire after 10 minutes of inactivity. Each successful
--    request resets the timer." "When `session_id` is set, sticky routing
--    activates on any successful request." "If the sticky provider becomes
--    unavailable, OpenRouter automatically falls back to the next-best provider."
-- So `order: [best, ...]` is a pin for every session at once: every request
-- goes to the first choice and falls to the next only when it fails, and the
-- cache stays warm on the first choice (PR damianvtran/local-operator#995
-- measured 77.2 % cached with order vs 63.5 % with session_id). What it costs:
-- all traffic on one upstream (its rate limits and outages become yours; each
-- fallback a cold cache) and OpenRouter's price-weighted choice. `ignore`
-- drops listed upstreams and the docs say nothing of it disabling stickiness:
-- sticky routing and load balancing continue over the rest. `sort` also
-- disables load balancing but coexists with the pin (ADR 0221: "sort picks the
-- first upstream, the pin keeps it"), so it is the setting to mention when
-- upstreams differ mainly in price or latency.
--
-- Inputs: upstream_scorecard, upstream_clusters (design effects),
-- upstream_p95_intervals, openrouter_upstreams, cache_hits (sticky hit rates),
-- openrouter_provider_slugs, switch_counts (switch_costs' counts, summed per model),
-- calls and ledger_span (the traffic of the last 30 days, which the money is projected from).
--
-- Which models: those with attempts that went to OpenRouter (provider =
-- 'openrouter'); any other model gets verdict does_not_apply.
-- Candidates: the model's scorecard rows whose identity is an upstream
-- OpenRouter named (attempts that named none count as unattributed_errors).
--
-- Statistics, per candidate (z = ledger_setting('confidence_z')):
--   error interval: Wilson score interval for p = errors/attempts with
--       n = attempts / error_deff effective samples (upstream_clusters: the
--       design effect of attempts clustered by session, >= 1):
--       centre = (p + z²/2n) / (1 + z²/n),
--       half = z / (1 + z²/n) * sqrt(p(1-p)/n + z²/4n²), clamped to [0, 1]
--   p95 interval: the order-statistic interval of upstream_p95_intervals, whose
--       ranks are widened by latency_deff.
--   sticky hit rate: token hit rate of its served attempts sent with a sticky
--       key (all its served attempts when none was keyed)
--   enough: attempts >= min_samples and latency samples >= min_samples
--
-- Judging: every candidate holding pinned sessions is judged against its best
-- alternative (the other enough candidate with the lowest error_rate, then
-- p95_latency_ms, then cost_per_mtok_input, then name). It is worse when it
-- is enough and
--     errors_worse  = error_low - best.error_high > error_rate_margin (only when
--                     error rates are observable: some failed OpenRouter attempt
--                     of the model named its upstream)
--  or latency_worse = p95_low > best.p95_high * (1 + latency_margin)
--  or cost_worse    = cost_per_mtok > best.cost_per_mtok * (1 + cost_margin), unless
--                     the alternative is itself worse on errors or latency by the
--                     same tests (a trade-off, which the other side's verdict states)
-- harm = sessions_pinned * (excess error rate + excess p95 / best p95 + excess
-- cost / best cost), excesses floored at 0: the worse upstream of most harm
-- speaks for the model (pinned_upstream).
--
-- Recommendation (W = the worse upstreams, share_W = their share of the
-- model's pinned sessions, G = the best enough candidate not in W):
--   share_W <  order_share_min: {"ignore": [W's slugs]}. Projected: W's
--       traffic moves to the others in proportion to their pinned sessions, at
--       their measured error rate, effective cost per Mtok input (which holds
--       their sticky cache hit rate: stickiness continues) and p95.
--   share_W >= order_share_min: {"order": [G, the other non-worse candidates],
--       "allow_fallbacks": true}. Projected: all the model's candidate traffic
--       on G, at hit rate h' = h_G * (1 - e_G) (G's sticky hit rate minus the
--       cold-cache share of its fallbacks), its effective price rescaled from
--       h_G to h' with cache reads at cache_read_price_ratio d:
--       cost_G * (1 - (1-d) h') / (1 - (1-d) h_G); concentration risk stated.
--   Retries avoided: the moved traffic's errors above the new error rate, each
--   priced at the model's mean cost per served attempt.
--   cost_change = projected - current - retries avoided (USD over the ledger);
--   monthly_effect_usd = cost_change / the model's calls in the ledger * its calls per
--   day in the window * 30 (negative = saving; null when costs are unknown). The window
--   is the ledger's last 30 days from its first call in them: traffic that continues,
--   never diluted by idle time before it (rows a year old change the change per call,
--   not the rate);
--   affordable = cost_change / current <= max_cost_increase.
--
-- verdict (kind):
--   does_not_apply     the model is not routed by OpenRouter
--   insufficient_data  no candidate holding pinned sessions is judgeable (enough
--                      data and an enough alternative)
--   warranted          W is not empty, G exists and the change is affordable
--   not_warranted      otherwise (the reason states the trade-off when W is not empty)
-- sessions_affected_share = share_W (0 when nothing is worse).
-- recommendation: JSON text of the `provider` object, OpenRouter slugs
-- (openrouter_provider_slugs; a derived slug is flagged in the reason); NULL
-- unless warranted.
CREATE OR REPLACE VIEW verdict_figures AS
WITH knobs AS (
    SELECT
        ledger_setting('min_samples') AS min_samples,
        ledger_setting('confidence_z') AS z,
        ledger_setting('error_rate_margin') AS error_margin,
        ledger_setting('latency_margin') AS latency_margin,
        ledger_setting('cost_margin') AS cost_margin,
        ledger_setting('max_cost_increase') AS max_cost_increase,
        ledger_setting('cache_read_price_ratio') AS price_ratio,
        ledger_setting('order_share_min') AS order_share_min
),
-- the window the money is projected from: the last 30 days of the ledger, from its
-- first call in them (a ledger younger than that, or one whose older rows sit behind
-- an idle gap, is not diluted by the time nothing ran)
span AS (
    SELECT
        any_value(l.first_at) AS judged_since,
        min(c.started_at) AS window_start,
        any_value(l.last_at) AS window_end,
        (epoch_us(any_value(l.last_at)) - epoch_us(min(c.started_at))) / 86400e6 AS window_days
    FROM calls AS c
    CROSS JOIN ledger_span AS l
    WHERE c.started_at >= l.last_at - INTERVAL 30 DAY
),
-- each model's calls over the ledger, and in the window
recent AS (
    SELECT
        c.requested_model,
        count(*) AS model_calls,
        count(*) FILTER (WHERE c.started_at >= s.window_start) AS recent_calls
    FROM calls AS c
    CROSS JOIN span AS s
    GROUP BY c.requested_model
),
models AS (
    SELECT
        requested_model,
        array_to_string(list_sort(list(DISTINCT upstream)), ', ') AS served_by
    FROM upstream_scorecard
    GROUP BY requested_model
),
traffic AS (
    SELECT
        requested_model,
        CAST(sum(attempts) AS BIGINT) AS routed_attempts,
        CAST(coalesce(sum(errors) FILTER (WHERE upstream IS NULL), 0) AS BIGINT)
            AS unattributed_errors,
        CAST(coalesce(sum(errors) FILTER (WHERE upstream IS NOT NULL), 0) AS BIGINT)
            AS attributed_errors
    FROM openrouter_upstreams
    GROUP BY requested_model
),
sticky AS (
    SELECT
        requested_model,
        upstream,
        CAST(sum(cache_read_tokens) FILTER (WHERE key_sent) AS DOUBLE)
            / nullif(sum(input_tokens) FILTER (WHERE key_sent), 0) AS keyed_hit_rate
    FROM cache_hits
    GROUP BY requested_model, upstream
),
candidates AS (
    SELECT
        s.requested_model,
        s.upstream,
        s.attempts,
        s.errors,
        s.error_rate,
        s.served_attempts,
        s.latency_samples,
        s.p95_latency_ms,
        s.cost_usd,
        CAST(s.cost_per_mtok_input AS DOUBLE) AS cost_per_mtok,
        CAST(s.cost_usd AS DOUBLE) * 1e6 / nullif(s.cost_per_mtok_input, 0) AS costed_input,
        s.sessions_pinned,
        coalesce(st.keyed_hit_rate, s.token_hit_rate, 0) AS hit_rate,
        i.p95_low_ms,
        i.p95_high_ms,
        greatest(coalesce(c.error_deff, 1.0), 1.0) AS error_deff,
        s.attempts / greatest(coalesce(c.error_deff, 1.0), 1.0) AS n_eff,
        coalesce(sl.slug, trim(regexp_replace(lower(trim(s.upstream)), '[^a-z0-9._]+', '-', 'g'), '-'))
            AS slug,
        sl.slug IS NOT NULL AS slug_known,
        s.attempts >= k.min_samples AND s.latency_samples >= k.min_samples AS enough
    FROM upstream_scorecard AS s
    CROSS JOIN knobs AS k
    LEFT JOIN upstream_p95_intervals AS i USING (requested_model, upstream)
    LEFT JOIN upstream_clusters AS c USING (requested_model, upstream)
    LEFT JOIN sticky AS st USING (requested_model, upstream)
    LEFT JOIN openrouter_provider_slugs AS sl ON sl.display_name = lower(trim(s.upstream))
    WHERE EXISTS (
        SELECT 1 FROM openrouter_upstreams AS r
        WHERE r.requested_model = s.requested_model AND r.upstream = s.upstream
    )
),
scored AS (
    SELECT
        c.*,
        greatest(0.0, least(1.0,
            (c.error_rate + k.z * k.z / (2 * c.n_eff)
                - k.z * sqrt(c.error_rate * (1 - c.error_rate) / c.n_eff
                    + k.z * k.z / (4.0 * c.n_eff * c.n_eff)))
            / (1 + k.z * k.z / c.n_eff))) AS error_low,
        greatest(0.0, least(1.0,
            (c.error_rate + k.z * k.z / (2 * c.n_eff)
                + k.z * sqrt(c.error_rate * (1 - c.error_rate) / c.n_eff
                    + k.z * k.z / (4.0 * c.n_eff * c.n_eff)))
            / (1 + k.z * k.z / c.n_eff))) AS error_high,
        CAST(c.sessions_pinned AS DOUBLE)
            / nullif(sum(c.sessions_pinned) OVER (PARTITION BY c.requested_model), 0)
            AS pinned_share,
        -- quality rank: errors, then p95, then price, then name
        row_number() OVER (
            PARTITION BY c.requested_model
            ORDER BY NOT c.enough, c.error_rate, c.p95_latency_ms NULLS LAST,
                c.cost_per_mtok NULLS LAST, c.upstream
        ) AS quality_rank
    FROM candidates AS c
    CROSS JOIN knobs AS k
),
paired AS (
    SELECT
        p.*,
        (SELECT first(b.upstream ORDER BY b.quality_rank)
            FROM scored AS b
            WHERE b.requested_model = p.requested_model AND b.enough
                AND b.upstream <> p.upstream) AS best_upstream
    FROM scored AS p
    WHERE p.sessions_pinned > 0
),
judged AS (
    SELECT
        x.*,
        b.error_rate AS best_error_rate,
        b.error_low AS best_error_low,
        b.error_high AS best_error_high,
        b.p95_latency_ms AS best_p95_ms,
        b.p95_low_ms AS best_p95_low_ms,
        b.p95_high_ms AS best_p95_high_ms,
        b.cost_per_mtok AS best_cost_per_mtok,
        b.hit_rate AS best_hit_rate,
        b.attempts AS best_attempts,
        t.attributed_errors > 0 AS error_rates_observable,
        x.enough AND x.best_upstream IS NOT NULL AS judgeable,
        t.attributed_errors > 0
            AND coalesce(x.error_low - b.error_high > k.error_margin, false) AS errors_worse,
        coalesce(x.p95_low_ms > b.p95_high_ms * (1 + k.latency_margin), false) AS latency_worse,
        -- dearer only counts against an upstream whose alternative is not itself
        -- worse on errors or latency (else it is a trade-off, not a bad upstream)
        coalesce(x.cost_per_mtok > b.cost_per_mtok * (1 + k.cost_margin), false)
            AND NOT coalesce(b.p95_low_ms > x.p95_high_ms * (1 + k.latency_margin), false)
            AND NOT (t.attributed_errors > 0
                AND coalesce(b.error_low - x.error_high > k.error_margin, false)) AS cost_worse,
        x.sessions_pinned * (
            CASE WHEN t.attributed_errors > 0
                THEN greatest(x.error_rate - b.error_rate, 0) ELSE 0 END
            + coalesce(greatest(x.p95_latency_ms / nullif(b.p95_latency_ms, 0) - 1, 0), 0)
            + coalesce(greatest(x.cost_per_mtok / nullif(b.cost_per_mtok, 0) - 1, 0), 0)
        ) AS harm
    FROM paired AS x
    CROSS JOIN knobs AS k
    JOIN traffic AS t USING (requested_model)
    LEFT JOIN scored AS b
        ON b.requested_model = x.requested_model AND b.upstream = x.best_upstream
),
flagged AS (
    SELECT
        *,
        judgeable AND (errors_worse OR latency_worse OR cost_worse) AS worse,
        row_number() OVER (
            PARTITION BY requested_model ORDER BY sessions_pinned DESC, upstream) AS pinned_rank,
        -- what it was judged worse on, against what: the sentences are written from it.
        -- Its first field orders a list of them (most harm first): an ordered aggregate
        -- loses its order on Spark, a sorted list does not
        {'harm_rank': row_number() OVER (
                PARTITION BY requested_model,
                    judgeable AND (errors_worse OR latency_worse OR cost_worse)
                ORDER BY harm DESC, upstream),
            'upstream': upstream, 'judged_against': best_upstream,
            'errors_worse': errors_worse, 'latency_worse': latency_worse,
            'cost_worse': cost_worse, 'error_rate': error_rate,
            'against_error_rate': best_error_rate, 'p95_ms': p95_latency_ms,
            'against_p95_ms': best_p95_ms, 'cost_per_mtok': cost_per_mtok,
            'against_cost_per_mtok': best_cost_per_mtok} AS judgement
    FROM judged
),
-- the worse upstreams of each model, and G: the best enough candidate not among them
worse_set AS (
    SELECT
        requested_model,
        list(upstream ORDER BY harm DESC, upstream) AS worse_list,
        list(slug ORDER BY harm DESC, upstream) AS worse_slugs,
        -- each with what it was judged against: with two worse upstreams, the
        -- first one's comparison may be the second, which is being dropped too
        list_sort(list(judgement)) AS worse_judged,
        sum(pinned_share) AS worse_share,
        -- NULL when none, in both engines (Spark collects no rows into [], DuckDB into NULL)
        CASE WHEN bool_or(NOT slug_known)
            THEN list_sort(list(upstream) FILTER (WHERE NOT slug_known)) END AS derived_slugs
    FROM flagged
    WHERE worse
    GROUP BY requested_model
),
-- the upstreams the worse ones' sessions would move to; sticky routing spreads new
-- sessions like the pinned ones, so each weighs by its pinned sessions (an upstream
-- holding none takes none), by attempts only when no kept upstream holds any
kept_rows AS (
    SELECT
        s.*,
        CASE WHEN sum(s.sessions_pinned) OVER (PARTITION BY s.requested_model) > 0
            THEN s.sessions_pinned ELSE s.attempts END AS weight
    FROM scored AS s
    LEFT JOIN worse_set AS w USING (requested_model)
    WHERE NOT coalesce(list_contains(w.worse_list, s.upstream), false)
),
kept AS (
    SELECT
        requested_model,
        first(upstream ORDER BY quality_rank) FILTER (WHERE enough) AS good_upstream,
        list(slug ORDER BY quality_rank) FILTER (WHERE enough) AS good_slugs,
        CASE WHEN bool_or(NOT slug_known AND enough)
            THEN list_sort(list(upstream) FILTER (WHERE NOT slug_known AND enough))
        END AS good_derived,
        sum(error_rate * weight) / nullif(sum(weight), 0) AS mix_error_rate,
        sum(cost_per_mtok * weight) FILTER (WHERE cost_per_mtok IS NOT NULL)
            / nullif(sum(weight) FILTER (WHERE cost_per_mtok IS NOT NULL), 0)
            AS mix_cost_per_mtok,
        bool_or(cost_per_mtok IS NULL AND weight > 0) AS mix_unpriced,
        sum(hit_rate * weight) / nullif(sum(weight), 0) AS mix_hit_rate
    FROM kept_rows
    GROUP BY requested_model
),
model_totals AS (
    SELECT
        s.requested_model,
        sum(CAST(s.cost_usd AS DOUBLE)) AS cost_usd,
        sum(s.costed_input) AS costed_input,
        bool_or(s.cost_usd IS NULL AND s.served_attempts > 0) AS unpriced,
        sum(CAST(s.cost_usd AS DOUBLE)) / nullif(sum(s.served_attempts), 0) AS cost_per_served,
        sum(s.errors) AS errors,
        sum(s.attempts) AS attempts,
        sum(CAST(s.cost_usd AS DOUBLE)) FILTER (WHERE coalesce(list_contains(w.worse_list, s.upstream), false))
            AS worse_cost_usd,
        sum(s.costed_input) FILTER (WHERE coalesce(list_contains(w.worse_list, s.upstream), false))
            AS worse_input,
        sum(s.errors) FILTER (WHERE coalesce(list_contains(w.worse_list, s.upstream), false))
            AS worse_errors,
        sum(s.attempts) FILTER (WHERE coalesce(list_contains(w.worse_list, s.upstream), false))
            AS worse_attempts,
        bool_or(s.cost_usd IS NULL AND s.served_attempts > 0
            AND coalesce(list_contains(w.worse_list, s.upstream), false)) AS worse_unpriced
    FROM scored AS s
    LEFT JOIN worse_set AS w USING (requested_model)
    GROUP BY s.requested_model
),
switching AS (
    SELECT
        m.requested_model,
        CAST(sum(m.switches) AS BIGINT) AS switches,
        CAST(sum(m.idle_releases) AS BIGINT) AS idle_releases,
        CAST(sum(m.switch_tokens_lost + m.release_tokens_lost) AS BIGINT) AS tokens_lost,
        CAST(sum(m.switch_tokens_lost + m.release_tokens_lost)
            * any_value(p.discount_per_mtok) / 1000000 AS DECIMAL(20, 10)) AS cost_usd,
        bool_or(p.discount_per_mtok IS NULL) AS unpriced
    FROM switch_counts AS m
    LEFT JOIN model_prices AS p USING (requested_model)
    GROUP BY m.requested_model
),
-- one judged upstream speaks for the model: the worse one of most harm, else
-- a judgeable one holding the most pinned sessions, else the most pinned
speaker AS (
    SELECT *
    FROM (
        SELECT
            *,
            row_number() OVER (
                PARTITION BY requested_model
                ORDER BY worse DESC, harm DESC, judgeable DESC, sessions_pinned DESC,
                    attempts DESC, upstream
            ) AS pick
        FROM flagged
    )
    WHERE pick = 1
),
per_model AS (
    SELECT
        requested_model,
        string_agg(upstream, ', ' ORDER BY sessions_pinned DESC, upstream) AS judged_upstreams,
        string_agg(upstream, ', ' ORDER BY sessions_pinned DESC, upstream) FILTER (WHERE worse)
            AS worse_upstreams,
        bool_or(judgeable) AS any_judgeable,
        -- most pinned sessions first (the first field orders the sorted list)
        CASE WHEN bool_or(NOT judgeable) THEN list_sort(
            list({'pinned_rank': pinned_rank, 'upstream': upstream, 'attempts': attempts})
                FILTER (WHERE NOT judgeable)) END AS unjudged
    FROM flagged
    GROUP BY requested_model
),
projected AS (
    SELECT
        m.requested_model,
        m.served_by,
        t.requested_model IS NOT NULL AS routed,
        t.routed_attempts,
        t.unattributed_errors,
        pm.judged_upstreams,
        pm.worse_upstreams,
        coalesce(pm.any_judgeable, false) AS any_judgeable,
        pm.unjudged,
        r.* EXCLUDE (requested_model),
        w.worse_judged,
        w.worse_slugs,
        coalesce(w.worse_share, 0) AS worse_share,
        w.derived_slugs,
        g.good_upstream,
        g.good_slugs,
        g.good_derived,
        g.mix_error_rate,
        g.mix_cost_per_mtok,
        g.mix_hit_rate,
        g.mix_unpriced,
        gc.error_rate AS good_error_rate,
        gc.hit_rate AS good_hit_rate,
        gc.cost_per_mtok AS good_cost_per_mtok,
        gc.p95_latency_ms AS good_p95_ms,
        gc.pinned_share AS good_pinned_share,
        CASE WHEN w.worse_list IS NULL OR g.good_upstream IS NULL THEN NULL
            WHEN w.worse_share < k.order_share_min THEN 'ignore'
            ELSE 'order' END AS kind,
        mt.cost_usd AS model_cost_usd,
        mt.cost_per_served,
        mt.unpriced,
        mt.worse_cost_usd,
        mt.worse_unpriced,
        -- the traffic that would change upstream, its cost now and projected
        CASE WHEN w.worse_share < k.order_share_min THEN mt.worse_cost_usd
            ELSE mt.cost_usd END AS current_usd,
        CASE WHEN w.worse_share < k.order_share_min
            THEN mt.worse_input * g.mix_cost_per_mtok / 1e6
            ELSE mt.costed_input * gc.cost_per_mtok
                * (1 - (1 - k.price_ratio) * gc.hit_rate * (1 - gc.error_rate))
                / nullif(1 - (1 - k.price_ratio) * gc.hit_rate, 0) / 1e6
        END AS projected_usd,
        CASE WHEN w.worse_share < k.order_share_min
            THEN greatest(mt.worse_errors - g.mix_error_rate * mt.worse_attempts, 0)
            ELSE greatest(mt.errors - gc.error_rate * mt.attempts, 0)
        END AS retries_avoided,
        gc.hit_rate * (1 - gc.error_rate) AS order_hit_rate,
        sw.switches,
        sw.idle_releases,
        sw.tokens_lost,
        sw.cost_usd AS switch_cost_usd,
        sw.unpriced AS switch_unpriced,
        rc.model_calls,
        rc.recent_calls,
        sp.judged_since,
        sp.window_start,
        sp.window_end,
        sp.window_days,
        -- per 30 days at the recent rate: the change per call times the calls a month brings
        30.0 * rc.recent_calls / nullif(sp.window_days, 0) / nullif(rc.model_calls, 0)
            AS month_scale,
        k.min_samples,
        k.max_cost_increase,
        k.error_margin,
        k.latency_margin,
        k.cost_margin
    FROM models AS m
    CROSS JOIN knobs AS k
    CROSS JOIN span AS sp
    LEFT JOIN recent AS rc USING (requested_model)
    LEFT JOIN traffic AS t USING (requested_model)
    LEFT JOIN per_model AS pm USING (requested_model)
    LEFT JOIN speaker AS r USING (requested_model)
    LEFT JOIN worse_set AS w USING (requested_model)
    LEFT JOIN kept AS g USING (requested_model)
    LEFT JOIN scored AS gc
        ON gc.requested_model = m.requested_model AND gc.upstream = g.good_upstream
    LEFT JOIN model_totals AS mt USING (requested_model)
    LEFT JOIN switching AS sw USING (requested_model)
),
costed AS (
    SELECT
        *,
        CASE WHEN kind IS NULL OR unpriced OR (kind = 'ignore' AND mix_unpriced) THEN NULL
            ELSE projected_usd - current_usd - retries_avoided * cost_per_served
        END AS cost_change_usd
    FROM projected
),
decided AS (
    SELECT
        *,
        cost_change_usd / nullif(current_usd, 0) AS cost_change_share,
        coalesce(cost_change_usd / nullif(current_usd, 0) <= max_cost_increase, true)
            AS affordable,
        CASE
            WHEN NOT routed THEN 'does_not_apply'
            WHEN NOT any_judgeable THEN 'insufficient_data'
            WHEN kind IS NOT NULL
                AND coalesce(cost_change_usd / nullif(current_usd, 0) <= max_cost_increase, true)
                THEN 'warranted'
            ELSE 'not_warranted'
        END AS verdict,
        CASE kind
            WHEN 'ignore' THEN CAST(to_json({'ignore': worse_slugs}) AS VARCHAR)
            WHEN 'order' THEN CAST(to_json({'order': good_slugs, 'allow_fallbacks': true}) AS VARCHAR)
        END AS proposal
    FROM costed
)
SELECT
    requested_model,
    verdict,
    CASE WHEN routed THEN upstream END AS pinned_upstream,
    CASE WHEN verdict IN ('warranted', 'not_warranted') AND kind IS NOT NULL
        THEN good_upstream ELSE best_upstream END AS best_upstream,
    CASE WHEN verdict = 'warranted' THEN proposal END AS recommendation,
    CASE WHEN verdict IN ('warranted', 'not_warranted') AND kind IS NOT NULL
        THEN CAST(cost_change_usd * month_scale AS DECIMAL(20, 6)) END AS monthly_effect_usd,
    CASE WHEN routed AND any_judgeable THEN worse_share END AS sessions_affected_share,
    pinned_share,
    judged_upstreams,
    coalesce(worse_upstreams, '') AS worse_upstreams,
    error_rates_observable,
    coalesce(unattributed_errors, 0) AS unattributed_errors,
    error_rate AS pinned_error_rate,
    error_low AS pinned_error_low,
    error_high AS pinned_error_high,
    best_error_rate,
    best_error_low,
    best_error_high,
    p95_latency_ms AS pinned_p95_ms,
    p95_low_ms AS pinned_p95_low_ms,
    p95_high_ms AS pinned_p95_high_ms,
    best_p95_ms,
    best_p95_low_ms,
    best_p95_high_ms,
    error_deff AS pinned_error_deff,
    hit_rate AS pinned_hit_rate,
    best_hit_rate,
    cost_per_mtok AS pinned_cost_per_mtok,
    best_cost_per_mtok,
    cost_change_share,
    switch_cost_usd,
    coalesce(errors_worse, false) AS errors_worse,
    coalesce(latency_worse, false) AS latency_worse,
    coalesce(cost_worse, false) AS cost_worse,
    affordable,
    -- typed figures the sentences are written from (ledger.analytics.verdict_words)
    kind AS action,
    served_by,
    coalesce(worse, false) AS pinned_worse,
    attempts AS pinned_attempts,
    latency_samples AS pinned_latency_samples,
    best_attempts,
    coalesce(routed_attempts, 0) AS routed_attempts,
    worse_judged,
    unjudged,
    CASE kind WHEN 'ignore' THEN derived_slugs WHEN 'order' THEN good_derived END
        AS slug_unknown_upstreams,
    mix_error_rate AS ignore_error_rate,
    mix_hit_rate AS ignore_hit_rate,
    mix_cost_per_mtok AS ignore_cost_per_mtok,
    order_hit_rate,
    good_hit_rate AS order_sticky_hit_rate,
    good_error_rate AS order_error_rate,
    coalesce(good_pinned_share, 0) AS order_pinned_share,
    cost_change_usd,
    coalesce(switches, 0) AS switches,
    coalesce(idle_releases, 0) AS idle_releases,
    coalesce(tokens_lost, 0) AS switch_tokens_lost,
    coalesce(switch_unpriced, false) AS switch_unpriced,
    model_calls,
    recent_calls,
    recent_calls / nullif(window_days, 0) AS recent_calls_per_day,
    judged_since,
    window_start,
    window_end,
    window_days,
    CAST(min_samples AS BIGINT) AS min_samples,
    error_margin,
    latency_margin,
    cost_margin,
    max_cost_increase
FROM decided
ORDER BY requested_model;
