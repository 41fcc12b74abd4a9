"""The state layer: intermediates kept incrementally, so the views read thousands of rows.

Each ``state_*`` table is folded from the rows the copy layer adds, changes or
removes (:mod:`ledger.analytics.state.aggregates` drives them; the other
modules each keep one family of tables). Nothing here reads a setting, and
nothing here is a user-facing metric: the models (``ledger/analytics/sql/``)
read these tables.
"""
