-- provider_order_verdict: one row per requested_model. Should this model's
-- OpenRouter calls pin an upstream with provider.order (ADR 0221, decision 3)?
-- provider.order turns sticky routing off, so it is warranted only when the
-- upstream holding the pinned sessions is measurably bad AND moving away does
-- not cost more in lost prompt-cache hits than it saves.
--
-- Inputs: the views upstream_scorecard, upstream_p95_intervals (the p95
-- intervals below) and keyless_hit_rates (h_keyless below).
--
-- Upstreams (figures from upstream_scorecard):
--   pinned_upstream = the upstream with the most sessions_pinned (ties: more
--                     attempts, then name); none -> insufficient_data
--   best_upstream   = among the other upstreams with >= min_samples attempts and
--                     latency samples, the lowest error_rate, then p95_latency_ms,
--                     then cost_per_mtok_input
--
-- Statistics (z = ledger_setting('confidence_z'), 1.96 = 95 % two-sided):
--   error-rate interval: Wilson score interval for e errors in n attempts,
--       p = e/n, centre = (p + z²/2n) / (1 + z²/n),
--       half = z / (1 + z²/n) * sqrt(p(1-p)/n + z²/4n²)
--   p95 interval: distribution-free order-statistic interval for the 0.95
--       quantile of n served latencies x(1) <= ... <= x(n):
--       [x(r), x(s)], r = floor(0.95n - z*sqrt(0.95*0.05*n)),
--       s = ceil(0.95n + z*sqrt(0.95*0.05*n)), clamped to [1, n]
--   "worse with confidence" means the two intervals are apart by the margin
--   (non-overlap of two 95 % intervals is a stricter test than 5 %):
--     errors_worse  = pinned.error_low - best.error_high > error_rate_margin
--     latency_worse = pinned.p95_low > best.p95_high * (1 + latency_margin)
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
-- verdict:
--   insufficient_data  no pinned upstream, the pinned one has < min_samples
--                      attempts or latency samples, or no alternative qualifies
--   warranted          (errors_worse OR latency_worse OR cost_worse) AND affordable
--   not_warranted      otherwise
-- reason: one sentence with the figures behind the verdict.
CREATE OR REPLACE VIEW provider_order_verdict AS
WITH knobs AS (
    SELECT
        ledger_setting('min_samples') AS min_samples,
        ledger_setting('confidence_z') AS z,
        ledger_setting('error_rate_margin') AS error_margin,
        ledger_setting('latency_margin') AS latency_margin,
        ledger_setting('cost_margin') AS cost_margin,
        ledger_setting('max_cost_increase') AS max_cost_increase,
        ledger_setting('cache_read_price_ratio') AS price_ratio
),
scored AS (
    SELECT
        s.*,
        i.p95_low_ms,
        i.p95_high_ms,
        (s.error_rate + k.z * k.z / (2 * s.attempts)
            - k.z * sqrt(s.error_rate * (1 - s.error_rate) / s.attempts
                + k.z * k.z / (4.0 * s.attempts * s.attempts)))
            / (1 + k.z * k.z / s.attempts) AS error_low,
        (s.error_rate + k.z * k.z / (2 * s.attempts)
            + k.z * sqrt(s.error_rate * (1 - s.error_rate) / s.attempts
                + k.z * k.z / (4.0 * s.attempts * s.attempts)))
            / (1 + k.z * k.z / s.attempts) AS error_high,
        s.attempts >= k.min_samples AND s.latency_samples >= k.min_samples AS enough
    FROM upstream_scorecard AS s
    CROSS JOIN knobs AS k
    LEFT JOIN upstream_p95_intervals AS i USING (requested_model, upstream)
),
choice AS (
    SELECT
        m.requested_model,
        (SELECT first(p.upstream ORDER BY p.sessions_pinned DESC, p.attempts DESC, p.upstream)
            FROM scored AS p
            WHERE p.requested_model = m.requested_model AND p.sessions_pinned > 0)
            AS pinned_upstream
    FROM (SELECT DISTINCT requested_model FROM scored) AS m
),
paired AS (
    SELECT
        c.requested_model,
        c.pinned_upstream,
        (SELECT first(b.upstream ORDER BY b.error_rate, b.p95_latency_ms,
                b.cost_per_mtok_input NULLS LAST, b.upstream)
            FROM scored AS b
            WHERE b.requested_model = c.requested_model AND b.enough
                AND b.upstream <> c.pinned_upstream) AS best_upstream
    FROM choice AS c
),
compared AS (
    SELECT
        x.requested_model,
        x.pinned_upstream,
        x.best_upstream,
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
        k.*
    FROM paired AS x
    CROSS JOIN knobs AS k
    LEFT JOIN scored AS p
        ON p.requested_model = x.requested_model AND p.upstream = x.pinned_upstream
    LEFT JOIN scored AS b
        ON b.requested_model = x.requested_model AND b.upstream = x.best_upstream
    LEFT JOIN keyless_hit_rates AS kl ON kl.requested_model = x.requested_model
),
judged AS (
    SELECT
        *,
        coalesce(pinned_error_low - best_error_high > error_margin, false) AS errors_worse,
        coalesce(pinned_p95_low_ms > best_p95_high_ms * (1 + latency_margin), false)
            AS latency_worse,
        coalesce(pinned_cost_per_mtok > best_projected_cost_per_mtok * (1 + cost_margin), false)
            AS cost_worse,
        coalesce(
            best_projected_cost_per_mtok <= pinned_cost_per_mtok * (1 + max_cost_increase), true
        ) AS affordable
    FROM compared
),
decided AS (
    SELECT
        *,
        CASE
            WHEN pinned_upstream IS NULL OR NOT pinned_enough OR best_upstream IS NULL
                THEN 'insufficient_data'
            WHEN (errors_worse OR latency_worse OR cost_worse) AND affordable THEN 'warranted'
            ELSE 'not_warranted'
        END AS verdict,
        printf(
            '%s errs %.1f%% (CI %.1f-%.1f%%) of %d attempts, p95 %.0f ms (CI %.0f-%.0f), %s/Mtok input',
            pinned_upstream, 100 * pinned_error_rate, 100 * pinned_error_low,
            100 * pinned_error_high, pinned_attempts, pinned_p95_ms, pinned_p95_low_ms,
            pinned_p95_high_ms,
            coalesce(printf('$%.4f', pinned_cost_per_mtok), 'unknown cost')
        ) AS pinned_figures,
        printf(
            '%s errs %.1f%% (CI %.1f-%.1f%%) of %d attempts, p95 %.0f ms (CI %.0f-%.0f), %s/Mtok input once its cache hit rate falls from %.0f%% to %.0f%%',
            best_upstream, 100 * best_error_rate, 100 * best_error_low, 100 * best_error_high,
            best_attempts, best_p95_ms, best_p95_low_ms, best_p95_high_ms,
            coalesce(printf('$%.4f', best_projected_cost_per_mtok), 'unknown cost'),
            100 * coalesce(best_hit_rate, 0), 100 * least(keyless_hit_rate, coalesce(best_hit_rate, 0))
        ) AS best_figures
    FROM judged
)
SELECT
    requested_model,
    verdict,
    pinned_upstream,
    best_upstream,
    CASE
        WHEN pinned_upstream IS NULL
            THEN 'No session is pinned to a single upstream yet, so there is nothing to judge.'
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
                'Pinned %s is worse on %s than %s, and switching is affordable: provider.order is warranted.',
                pinned_figures,
                concat_ws(' and ',
                    CASE WHEN errors_worse THEN 'errors' END,
                    CASE WHEN latency_worse THEN 'p95 latency' END,
                    CASE WHEN cost_worse THEN 'cost' END),
                best_figures)
        WHEN errors_worse OR latency_worse
            THEN printf(
                'Pinned %s is worse than %s, but losing the cache would cost more than the allowed %.0f%%: provider.order is not warranted.',
                pinned_figures, best_figures, 100 * max_cost_increase)
        ELSE printf(
            'Pinned %s is not worse beyond the margins with confidence than %s: provider.order is not warranted.',
            pinned_figures, best_figures)
    END AS reason,
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
    errors_worse,
    latency_worse,
    cost_worse,
    affordable
FROM decided;
