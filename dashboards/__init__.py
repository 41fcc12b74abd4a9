"""The Streamlit dashboard over the ledger's analytics (``ledger dashboard``).

``app.py`` is the router and frame (navigation, sidebar filters, empty and
error states); ``screens/`` holds one script per page. Every number comes from
the analytics layer (:class:`~ledger.analytics.Analytics`); nothing here writes
SQL. The helpers beside them:

* :mod:`dashboards.data`: the cached :class:`~ledger.analytics.Analytics`
  resource and cached, filter-keyed results;
* :mod:`dashboards.summary`: pure arithmetic over view results (headline rates);
* :mod:`dashboards.fmt`: labels, money, rates, ledger text made inert, and tables
  with CSV downloads;
* :mod:`dashboards.charts`: UTC time axes, money as floats, upstream labels;
* :mod:`dashboards.verdicts`: the verdict strip (landing and upstreams pages);
* :mod:`dashboards.filters`: the shared sidebar filters;
* :mod:`dashboards.notices`: what the page says when there is nothing to show.
"""
