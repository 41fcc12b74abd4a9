-- ledger_span, as stored in the analytics file: the same row as
-- sql/ledger_span.sql, kept by sync in state_span (least and greatest as rows
-- come, read again from the rows when some are replaced or removed). It holds
-- one row or, with no rows folded, none: max() gives the one row either way.
CREATE OR REPLACE VIEW ledger_span AS
SELECT max(first_at) AS first_at, max(last_at) AS last_at
FROM state_span;
