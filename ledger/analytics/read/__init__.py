"""The read layer: what users and the dashboard call, over the views only.

:class:`~ledger.analytics.read.api.Analytics` (sync, views, read-only SQL),
the figures and savings (``figures``, ``prices``), spend for budgets and the
policy experiments.
"""
