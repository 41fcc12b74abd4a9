-- ledger_span: one row, the first and last started_at of the rows (both NULL
-- when there are none): the time the ledger spans, which overview_totals shows
-- and the verdict scales its effect to a month by.
CREATE OR REPLACE VIEW ledger_span AS
SELECT min(started_at) AS first_at, max(started_at) AS last_at
FROM token_usage;
