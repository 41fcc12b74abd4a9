"""The models layer: the views, one SELECT per file in ``ledger/analytics/sql/``.

:mod:`~ledger.analytics.models.views` installs them in the analytics file and
builds filtered reads; :mod:`~ledger.analytics.models.graph` derives which
views each one reads from the SQL itself.
"""
