-- provider_order_verdict: one row per requested_model, the contract's view (README,
-- "The provider routing verdict"): the typed figures of verdict_figures, plus the
-- headline and the reason. Those two sentences are written in Python from the typed
-- columns (ledger.analytics.verdict_words, the one place the verdict's words live)
-- and kept in verdict_sentences: a table in the analytics file, written after each
-- sync and settings change; a view over the same Python in the lake engines.
CREATE OR REPLACE VIEW provider_order_verdict AS
SELECT f.*, s.headline, s.reason
FROM verdict_figures AS f
LEFT JOIN verdict_sentences AS s ON s.requested_model = f.requested_model
ORDER BY f.requested_model;
