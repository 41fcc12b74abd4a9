-- upstream_clusters' rows computed from state_clusters (the per-session sums
-- sync keeps, see ledger/analytics/clusters.py) at the end of each sync into
-- state_upstream_clusters, which sql/stored/upstream_clusters.sql reads: the
-- same rows and columns as views/upstream_clusters.sql (formulas there). No
-- setting enters them, and the verdict reads them twice (itself and through
-- upstream_p95_intervals): computed once per sync, not twice per read.
WITH cluster_sums AS (
    SELECT * FROM state_clusters
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
FROM icc
