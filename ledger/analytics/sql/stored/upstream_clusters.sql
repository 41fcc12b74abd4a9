-- upstream_clusters, as stored in the analytics file: the same rows and columns
-- as views/upstream_clusters.sql (formulas there), computed at the end of each
-- sync from state_clusters into state_upstream_clusters
-- (sql/summaries/upstream_clusters.sql, ledger/analytics/clusters.py).
CREATE OR REPLACE VIEW upstream_clusters AS
SELECT * FROM state_upstream_clusters;
