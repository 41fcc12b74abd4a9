-- upstream_clusters: one row per (requested_model, upstream identity as column
-- upstream) with attempts. A helper of provider_order_verdict: how much the
-- attempts cluster by session, as a design effect that widens its intervals.
--
-- Attempts of one session (session_id, actor_id, requested_model) share a
-- conversation, a prompt and a pin, so they are not independent draws: an
-- upstream's 30 errors may be one bad session. Each session's attempts on an
-- upstream are one cluster; attempts without a session_id are clusters of one.
-- For a value y per attempt (an error: 1 or 0; a served attempt's latency_ms)
-- and clusters i = 1..k of n_i values (N in all, S_i their sum, Q the sum of
-- squares), the one-way ANOVA estimator of the intraclass correlation:
--   MSB = (sum S_i^2/n_i - (sum S_i)^2/N) / (k - 1)
--   MSW = (Q - sum S_i^2/n_i) / (N - k)
--   n0  = (N - sum n_i^2/N) / (k - 1)
--   icc = (MSB - MSW) / (MSB + (n0 - 1) MSW), clamped to [0, 1] (0 when undefined:
--         a single cluster, clusters of one, or no variation)
-- and Kish's design effect for clusters of unequal size:
--   deff = 1 + (sum n_i^2 / N - 1) * icc          (>= 1; 1 when independent)
-- The verdict computes its intervals with N / deff effective samples.
--
--   attempts, errors            = rows with attempt >= 1, those with status 'error'
--                                 (not abandoned: the caller left, no upstream failed)
--   error_clusters              = sessions (and loose attempts) with attempts here
--   error_icc, error_deff       = of the error indicator
--   latency_samples             = served attempts (status 'ok', not a response-cache
--                                 hit) with a latency_ms
--   latency_clusters, latency_icc,
--   latency_deff                = of latency_ms (the p95 interval's ranks use it: Kish's
--                                 approximation of a quantile's design effect by the mean's)
CREATE OR REPLACE VIEW upstream_clusters AS
WITH cluster_sums AS (
    SELECT
        requested_model,
        upstream,
        loose,
        count(*) AS attempts,
        count(*) FILTER (WHERE status = 'error' AND NOT abandoned) AS errors,
        count(latency_ms) FILTER (WHERE served) AS latencies,
        coalesce(sum(latency_ms) FILTER (WHERE served), 0) AS latency_sum,
        coalesce(sum(latency_ms * latency_ms) FILTER (WHERE served), 0) AS latency_sq
    FROM (
        SELECT
            requested_model,
            coalesce(upstream, provider) AS upstream,
            session_id,
            CASE WHEN session_id IS NOT NULL THEN actor_id END AS actor_id,
            session_id IS NULL AS loose,
            status,
            coalesce(error_type = 'abandoned', false) AS abandoned,
            latency_ms,
            status = 'ok' AND NOT response_cache_hit AS served
        FROM token_usage
        WHERE attempt >= 1
    )
    GROUP BY requested_model, upstream, session_id, actor_id, loose
),
agg AS (
    SELECT
        requested_model,
        upstream,
        CAST(sum(attempts) AS BIGINT) AS attempts,
        CAST(sum(errors) AS BIGINT) AS errors,
        sum(CASE WHEN loose THEN attempts ELSE 1 END) FILTER (WHERE attempts > 0)
            AS error_clusters,
        sum(CASE WHEN loose THEN attempts ELSE attempts * attempts END) AS attempts_sq,
        sum(CASE WHEN loose THEN errors ELSE errors * errors / attempts END)
            FILTER (WHERE attempts > 0) AS errors_between,
        CAST(sum(latencies) AS BIGINT) AS latency_samples,
        sum(latency_sum) AS latency_sum,
        sum(latency_sq) AS latency_sq,
        sum(CASE WHEN loose THEN latencies ELSE 1 END) FILTER (WHERE latencies > 0)
            AS latency_clusters,
        sum(CASE WHEN loose THEN latencies ELSE latencies * latencies END) AS latencies_sq,
        sum(CASE WHEN loose THEN latency_sq ELSE latency_sum * latency_sum / latencies END)
            FILTER (WHERE latencies > 0) AS latency_between
    FROM cluster_sums
    GROUP BY requested_model, upstream
),
-- one-way ANOVA pieces: (N, k, sum, sum of squares, sum of S_i^2/n_i, sum of n_i^2)
anova AS (
    SELECT
        requested_model,
        upstream,
        attempts,
        errors,
        error_clusters,
        latency_samples,
        latency_clusters,
        CAST(attempts_sq AS DOUBLE) / nullif(attempts, 0) AS error_mean_size,
        CAST(latencies_sq AS DOUBLE) / nullif(latency_samples, 0) AS latency_mean_size,
        (errors_between - CAST(errors AS DOUBLE) * errors / nullif(attempts, 0))
            / nullif(error_clusters - 1, 0) AS error_msb,
        (errors - errors_between) / nullif(attempts - error_clusters, 0) AS error_msw,
        (attempts - CAST(attempts_sq AS DOUBLE) / nullif(attempts, 0))
            / nullif(error_clusters - 1, 0) AS error_n0,
        (latency_between - latency_sum * latency_sum / nullif(latency_samples, 0))
            / nullif(latency_clusters - 1, 0) AS latency_msb,
        (latency_sq - latency_between) / nullif(latency_samples - latency_clusters, 0)
            AS latency_msw,
        (latency_samples - CAST(latencies_sq AS DOUBLE) / nullif(latency_samples, 0))
            / nullif(latency_clusters - 1, 0) AS latency_n0
    FROM agg
),
icc AS (
    SELECT
        *,
        greatest(0.0, least(1.0, coalesce(
            (error_msb - error_msw) / nullif(error_msb + (error_n0 - 1) * error_msw, 0), 0.0)))
            AS error_icc,
        greatest(0.0, least(1.0, coalesce(
            (latency_msb - latency_msw)
                / nullif(latency_msb + (latency_n0 - 1) * latency_msw, 0), 0.0)))
            AS latency_icc
    FROM anova
)
SELECT
    requested_model,
    upstream,
    attempts,
    errors,
    CAST(coalesce(error_clusters, 0) AS BIGINT) AS error_clusters,
    error_icc,
    1 + (coalesce(error_mean_size, 1) - 1) * error_icc AS error_deff,
    latency_samples,
    CAST(coalesce(latency_clusters, 0) AS BIGINT) AS latency_clusters,
    latency_icc,
    1 + (coalesce(latency_mean_size, 1) - 1) * latency_icc AS latency_deff
FROM icc;
