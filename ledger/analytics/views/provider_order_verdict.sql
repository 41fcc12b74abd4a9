-- provider_order_verdict: one row per requested_model. Should this model's
-- OpenRouter calls pin an upstream with provider.order (ADR 0221, decision 3)?
-- provider.order turns sticky routing off, so it is warranted only when an
-- upstream holding pinned sessions is measurably bad AND moving away does not
-- cost more in lost prompt-cache hits than it saves.
--
-- Inputs: the views upstream_scorecard, upstream_p95_intervals (the p95
-- intervals below), keyless_hit_rates (h_keyless below) and
-- openrouter_upstreams (the attempts that went to OpenRouter).
--
-- Which models: provider.order is an OpenRouter routing setting, so a model is
-- judged only when some of its attempts went to OpenRouter (provider =
-- 'openrouter'). Any other model (a direct provider, say gpt-4o-mini on OpenAI
-- with an Anthropic fallback) gets verdict not_warranted, no pinned or best
-- upstream, and a reason saying provider.order does not apply.
--
-- Candidates: the model's scorecard rows whose identity is an upstream
-- OpenRouter named. OpenRouter attempts that named no upstream (failures
-- behind OpenRouter) are no candidate: they count against the model's
-- OpenRouter traffic (unattributed_errors, stated in the reason).
--   pinned_share      = sessions_pinned / the model's sessions pinned to a candidate
--   pinned upstreams  = the one with the most pinned sessions, and every other
--                       with pinned_share >= ledger_setting('pinned_share_min');
--                       each is judged against its own best alternative
--   best alternative  = among the other candidates with >= min_samples attempts and
--                       latency samples, the lowest error_rate, then p95_latency_ms,
--                       then cost_per_mtok_input
--
-- Statistics (z = ledger_setting('confidence_z'), 1.96 = 95 % two-sided):
--   error-rate interval: Wilson score interval for e errors in n attempts,
--       p = e/n, centre = (p + z²/2n) / (1 + z²/n),
--       half = z / (1 + z²/n) * sqrt(p(1-p)/n + z²/4n²), clamped to [0, 1]
--   p95 interval: distribution-free order-statistic interval for the 0.95
--       quantile of n served latencies x(1) <= ... <= x(n):
--       [x(r), x(s)], r = floor(0.95n - z*sqrt(0.95*0.05*n)),
--       s = ceil(0.95n + z*sqrt(0.95*0.05*n)), clamped to [1, n]
--   "worse with confidence" means the two intervals are apart by the margin
--   (non-overlap of two 95 % intervals is a stricter test than 5 %):
--     errors_worse  = pinned.error_low - best.error_high > error_rate_margin,
--                     and only when error rates are observable (below)
--     latency_worse = pinned.p95_low > best.p95_high * (1 + latency_margin)
--   error_rates_observable = some failed OpenRouter attempt of the model named
--       its upstream. OpenRouter retries other upstreams internally, so failures
--       rarely reach the ledger with one; without any, every upstream's 0 % is
--       an absence of evidence, and the reason says so instead of quoting it.
--
-- Cost, including what the cache saves (cost_per_mtok_input is the effective
-- price, cache discounts included):
--   h_keyless = token hit rate of this model's served attempts sent without a
--               sticky key (>= min_samples of them, else 0: assume the cache is lost)
--   projected = best.cost_per_mtok_input scaled to the hit rate it would get
--               without stickiness, with cached tokens priced at
--               d = cache_read_price_ratio of uncached ones:
--               best.cost * (1 - (1-d) * h_keyless) / (1 - (1-d) * best.hit_rate)
--               (no change when h_keyless >= best.hit_rate). The whole price is
--               scaled, output included, which overstates the loss: cautious.
--   cost_worse = pinned.cost > projected * (1 + cost_margin)
--   affordable = projected <= pinned.cost * (1 + max_cost_increase)
--               (unknown costs: cost_worse is false, affordable is true)
--
-- A pinned upstream is judgeable when it has >= min_samples attempts and latency
-- samples and a best alternative exists; it is worse when judgeable AND
-- (errors_worse OR latency_worse OR cost_worse) AND affordable.
--
-- verdict:
--   not_warranted      the model is not routed by OpenRouter
--   warranted          some pinned upstream is worse (pinned_upstream: the one of
--                      them with the most pinned sessions)
--   not_warranted      otherwise, when some pinned upstream was judgeable
--   insufficient_data  no session is pinned to a candidate, or no pinned
--                      upstream is judgeable
-- reason: one sentence with the figures behind the verdict.
-- judged_upstreams: the pinned upstreams judged, most pinned sessions first
-- (comma-separated); worse_upstreams: those found worse ('' when none).
CREATE OR REPLACE VIEW provider_order_verdict AS
WITH knobs AS (
    SELECT
        ledger_setting('min_samples') AS min_samples,
        ledger_setting('confidence_z') AS z,
        ledger_setting('error_rate_margin') AS error_margin,
        ledger_setting('latency_margin') AS latency_margin,
        ledger_setting('cost_margin') AS cost_margin,
        ledger_setting('max_cost_increase') AS max_cost_increase,
        ledger_setting('cache_read_price_ratio') AS price_ratio,
        ledger_setting('pinned_share_min') AS pinned_share_min
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
scored AS (
    SELECT
        s.*,
        i.p95_low_ms,
        i.p95_high_ms,
        greatest(0.0, least(1.0,
            (s.error_rate + k.z * k.z / (2 * s.attempts)
                - k.z * sqrt(s.error_rate * (1 - s.error_rate) / s.attempts
                    + k.z * k.z / (4.0 * s.attempts * s.attempts)))
            / (1 + k.z * k.z / s.attempts))) AS error_low,
        greatest(0.0, least(1.0,
            (s.error_rate + k.z * k.z / (2 * s.attempts)
                + k.z * sqrt(s.error_rate * (1 - s.error_rate) / s.attempts
                    + k.z * k.z / (4.0 * s.attempts * s.attempts)))
            / (1 + k.z * k.z / s.attempts))) AS error_high,
        s.attempts >= k.min_samples AND s.latency_samples >= k.min_samples AS enough
    FROM upstream_scorecard AS s
    CROSS JOIN knobs AS k
    LEFT JOIN upstream_p95_intervals AS i USING (requested_model, upstream)
    WHERE EXISTS (
        SELECT 1 FROM openrouter_upstreams AS r
        WHERE r.requested_model = s.requested_model AND r.upstream = s.upstream
    )
),
pinned AS (
    SELECT
        requested_model,
        upstream,
        sessions_pinned,
        sessions_pinned / sum(sessions_pinned) OVER (PARTITION BY requested_model)
            AS pinned_share,
        row_number() OVER (
            PARTITION BY requested_model ORDER BY sessions_pinned DESC, attempts DESC, upstream
        ) AS size_rank
    FROM scored
    WHERE sessions_pinned > 0
),
paired AS (
    SELECT
        p.requested_model,
        p.upstream AS pinned_upstream,
        p.pinned_share,
        p.size_rank,
        (SELECT first(b.upstream ORDER BY b.error_rate, b.p95_latency_ms,
                b.cost_per_mtok_input NULLS LAST, b.upstream)
            FROM scored AS b
            WHERE b.requested_model = p.requested_model AND b.enough
                AND b.upstream <> p.upstream) AS best_upstream
    FROM pinned AS p
    CROSS JOIN knobs AS k
    WHERE p.size_rank = 1 OR p.pinned_share >= k.pinned_share_min
),
compared AS (
    SELECT
        x.requested_model,
        x.pinned_upstream,
        x.best_upstream,
        x.pinned_share,
        x.size_rank,
        p.sessions_pinned,
        p.attempts AS pinned_attempts,
        p.latency_samples AS pinned_latency_samples,
        p.enough AS pinned_enough,
        p.error_rate AS pinned_error_rate,
        p.error_low AS pinned_error_low,
        p.error_high AS pinned_error_high,
        p.p95_latency_ms AS pinned_p95_ms,
        p.p95_low_ms AS pinned_p95_low_ms,
        p.p95_high_ms AS pinned_p95_high_ms,
        p.token_hit_rate AS pinned_hit_rate,
        p.cost_per_mtok_input AS pinned_cost_per_mtok,
        b.attempts AS best_attempts,
        b.error_rate AS best_error_rate,
        b.error_low AS best_error_low,
        b.error_high AS best_error_high,
        b.p95_latency_ms AS best_p95_ms,
        b.p95_low_ms AS best_p95_low_ms,
        b.p95_high_ms AS best_p95_high_ms,
        b.token_hit_rate AS best_hit_rate,
        b.cost_per_mtok_input AS best_cost_per_mtok,
        coalesce(kl.hit_rate, 0) AS keyless_hit_rate,
        CASE
            WHEN coalesce(kl.hit_rate, 0) >= coalesce(b.token_hit_rate, 0)
            THEN b.cost_per_mtok_input
            ELSE b.cost_per_mtok_input
                * (1 - (1 - k.price_ratio) * coalesce(kl.hit_rate, 0))
                / (1 - (1 - k.price_ratio) * b.token_hit_rate)
        END AS best_projected_cost_per_mtok,
        t.attributed_errors > 0 AS error_rates_observable,
        k.*
    FROM paired AS x
    CROSS JOIN knobs AS k
    JOIN traffic AS t USING (requested_model)
    LEFT JOIN scored AS p
        ON p.requested_model = x.requested_model AND p.upstream = x.pinned_upstream
    LEFT JOIN scored AS b
        ON b.requested_model = x.requested_model AND b.upstream = x.best_upstream
    LEFT JOIN keyless_hit_rates AS kl ON kl.requested_model = x.requested_model
),
judged AS (
    SELECT
        *,
        error_rates_observable
            AND coalesce(pinned_error_low - best_error_high > error_margin, false)
            AS errors_worse,
        coalesce(pinned_p95_low_ms > best_p95_high_ms * (1 + latency_margin), false)
            AS latency_worse,
        coalesce(pinned_cost_per_mtok > best_projected_cost_per_mtok * (1 + cost_margin), false)
            AS cost_worse,
        coalesce(
            best_projected_cost_per_mtok <= pinned_cost_per_mtok * (1 + max_cost_increase), true
        ) AS affordable,
        pinned_enough AND best_upstream IS NOT NULL AS judgeable
    FROM compared
),
flagged AS (
    SELECT
        *,
        judgeable AND (errors_worse OR latency_worse OR cost_worse) AND affordable AS worse,
        concat_ws(' and ',
            CASE WHEN errors_worse THEN 'errors' END,
            CASE WHEN latency_worse THEN 'p95 latency' END,
            CASE WHEN cost_worse THEN 'cost' END) AS worse_on
    FROM judged
),
-- One pinned upstream speaks for the model: a worse one first, then a
-- judgeable one, then the one holding the most pinned sessions.
ranked AS (
    SELECT
        *,
        row_number() OVER (
            PARTITION BY requested_model ORDER BY worse DESC, judgeable DESC, size_rank
        ) AS pick
    FROM flagged
),
per_model AS (
    SELECT
        requested_model,
        string_agg(pinned_upstream, ', ' ORDER BY size_rank) AS judged_upstreams,
        string_agg(pinned_upstream, ', ' ORDER BY size_rank) FILTER (WHERE worse)
            AS worse_upstreams,
        string_agg(
            printf('%s (%.0f%% of pinned sessions, on %s)',
                pinned_upstream, 100 * pinned_share, worse_on),
            ', ' ORDER BY size_rank) FILTER (WHERE worse AND pick > 1) AS also_worse,
        string_agg(
            printf('%s (%.0f%% of pinned sessions, %d attempts)',
                pinned_upstream, 100 * pinned_share, pinned_attempts),
            ', ' ORDER BY size_rank) FILTER (WHERE NOT judgeable AND pick > 1) AS unjudged
    FROM ranked
    GROUP BY requested_model
),
decided AS (
    SELECT
        m.requested_model,
        m.served_by,
        t.requested_model IS NOT NULL AS routed,
        t.routed_attempts,
        t.unattributed_errors,
        pm.judged_upstreams,
        pm.worse_upstreams,
        pm.also_worse,
        pm.unjudged,
        r.*  EXCLUDE (requested_model),
        CASE
            WHEN t.requested_model IS NULL THEN 'not_warranted'
            WHEN r.pinned_upstream IS NULL OR NOT r.judgeable THEN 'insufficient_data'
            WHEN r.worse THEN 'warranted'
            ELSE 'not_warranted'
        END AS verdict,
        CASE
            WHEN r.error_rates_observable THEN printf(
                '%s errs %.1f%% (CI %.1f-%.1f%%) of %d attempts, p95 %.0f ms (CI %.0f-%.0f), %s/Mtok input',
                r.pinned_upstream, 100 * r.pinned_error_rate, 100 * r.pinned_error_low,
                100 * r.pinned_error_high, r.pinned_attempts, r.pinned_p95_ms,
                r.pinned_p95_low_ms, r.pinned_p95_high_ms,
                coalesce(printf('$%.4f', r.pinned_cost_per_mtok), 'unknown cost'))
            ELSE printf(
                '%s (%d attempts) p95 %.0f ms (CI %.0f-%.0f), %s/Mtok input',
                r.pinned_upstream, r.pinned_attempts, r.pinned_p95_ms, r.pinned_p95_low_ms,
                r.pinned_p95_high_ms,
                coalesce(printf('$%.4f', r.pinned_cost_per_mtok), 'unknown cost'))
        END AS pinned_figures,
        printf(
            '%s %s p95 %.0f ms (CI %.0f-%.0f), %s/Mtok input %s',
            r.best_upstream,
            CASE
                WHEN r.error_rates_observable THEN printf(
                    'errs %.1f%% (CI %.1f-%.1f%%) of %d attempts,', 100 * r.best_error_rate,
                    100 * r.best_error_low, 100 * r.best_error_high, r.best_attempts)
                ELSE printf('(%d attempts)', r.best_attempts)
            END,
            r.best_p95_ms, r.best_p95_low_ms, r.best_p95_high_ms,
            coalesce(printf('$%.4f', r.best_projected_cost_per_mtok), 'unknown cost'),
            CASE
                WHEN round(100 * coalesce(r.best_hit_rate, 0))
                    = round(100 * least(r.keyless_hit_rate, coalesce(r.best_hit_rate, 0)))
                THEN printf('at its cache hit rate of %.0f%%', 100 * coalesce(r.best_hit_rate, 0))
                ELSE printf(
                    'once its cache hit rate falls from %.0f%% to %.0f%%',
                    100 * coalesce(r.best_hit_rate, 0),
                    100 * least(r.keyless_hit_rate, coalesce(r.best_hit_rate, 0)))
            END
        ) AS best_figures,
        -- what the failures behind OpenRouter say, and do not say
        CASE
            WHEN NOT coalesce(r.error_rates_observable, true) AND t.unattributed_errors = 0
                THEN printf(
                    '; error rates were not observable, since no failed OpenRouter attempt named its upstream (OpenRouter retries other upstreams internally; none of the model''s %d OpenRouter attempts reached the ledger as a failure)',
                    t.routed_attempts)
            WHEN NOT coalesce(r.error_rates_observable, true) THEN printf(
                '; error rates were not observable, since no failed OpenRouter attempt named its upstream (OpenRouter retries other upstreams internally; %d of the model''s %d OpenRouter attempts failed without naming one)',
                t.unattributed_errors, t.routed_attempts)
            WHEN t.unattributed_errors > 0 THEN printf(
                '; %d of the model''s %d OpenRouter attempts (%.1f%%) failed without naming an upstream',
                t.unattributed_errors, t.routed_attempts,
                100.0 * t.unattributed_errors / t.routed_attempts)
            ELSE ''
        END AS errors_note
    FROM models AS m
    LEFT JOIN traffic AS t USING (requested_model)
    LEFT JOIN per_model AS pm USING (requested_model)
    LEFT JOIN (SELECT * FROM ranked WHERE pick = 1) AS r USING (requested_model)
)
SELECT
    requested_model,
    verdict,
    pinned_upstream,
    best_upstream,
    CASE
        WHEN NOT routed
            THEN printf(
                '%s is not routed by OpenRouter (its attempts went to %s), so provider.order does not apply.',
                requested_model, served_by)
        WHEN pinned_upstream IS NULL
            THEN 'No session is pinned to a single OpenRouter upstream yet, so there is nothing to judge.'
        WHEN NOT pinned_enough
            THEN printf(
                'Pinned upstream %s has %d attempts and %d latency samples, fewer than the %d needed.',
                pinned_upstream, pinned_attempts, pinned_latency_samples, CAST(min_samples AS BIGINT))
        WHEN best_upstream IS NULL
            THEN printf(
                'Pinned upstream %s has no alternative with at least %d attempts to compare against.',
                pinned_upstream, CAST(min_samples AS BIGINT))
        WHEN verdict = 'warranted'
            THEN printf(
                'Pinned %s is worse on %s than %s%s, and switching is affordable%s: provider.order is warranted.',
                pinned_figures, worse_on, best_figures,
                coalesce('; so is ' || also_worse, ''), errors_note)
        WHEN errors_worse OR latency_worse
            THEN printf(
                'Pinned %s is worse than %s, but losing the cache would cost more than the allowed %.0f%%%s%s: provider.order is not warranted.',
                pinned_figures, best_figures, 100 * max_cost_increase,
                coalesce('; too few attempts to judge ' || unjudged, ''), errors_note)
        ELSE printf(
            'Pinned %s is not worse beyond the margins with confidence than %s%s%s: provider.order is not warranted.',
            pinned_figures, best_figures,
            coalesce('; too few attempts to judge ' || unjudged, ''), errors_note)
    END AS reason,
    pinned_share,
    judged_upstreams,
    coalesce(worse_upstreams, '') AS worse_upstreams,
    error_rates_observable,
    coalesce(unattributed_errors, 0) AS unattributed_errors,
    pinned_error_rate,
    pinned_error_low,
    pinned_error_high,
    best_error_rate,
    best_error_low,
    best_error_high,
    pinned_p95_ms,
    pinned_p95_low_ms,
    pinned_p95_high_ms,
    best_p95_ms,
    best_p95_low_ms,
    best_p95_high_ms,
    keyless_hit_rate,
    pinned_cost_per_mtok,
    best_projected_cost_per_mtok,
    coalesce(errors_worse, false) AS errors_worse,
    coalesce(latency_worse, false) AS latency_worse,
    coalesce(cost_worse, false) AS cost_worse,
    coalesce(affordable, true) AS affordable
FROM decided;
