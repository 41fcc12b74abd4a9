"""The copy layer: the ledger's rows into the analytics file, and nothing computed from them.

``sync`` reads the ledger's change log through ADBC into Arrow (``source``,
``prefetch``), tracks the ids it has and the holes late commits leave
(``gaps``), appends to the DuckDB file (``local``) and checks the copy against
the ledger (``verify``). After each copy it hands the new and changed rows to
the state layer (:mod:`ledger.analytics.state`).
"""
