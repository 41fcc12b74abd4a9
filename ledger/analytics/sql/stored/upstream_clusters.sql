-- upstream_clusters, as stored in the analytics file: the same rows and columns
-- as views/upstream_clusters.sql (formulas there), computed at the end of each
-- sync by that view's definition over state_clusters (the per-session sums sync
-- keeps) into state_upstream_clusters (see ledger/analytics/clusters.py). No
-- setting enters them, and the verdict reads them twice (itself and through
-- upstream_p95_intervals): computed once per sync, not twice per read.
CREATE OR REPLACE VIEW upstream_clusters AS
SELECT * FROM state_upstream_clusters;
