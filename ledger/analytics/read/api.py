"""The Python API: one object over the local DuckDB file, returning DataFrames.

::

    from ledger.analytics import Analytics, Filters
    with Analytics() as a:                   # LEDGER_DATABASE_URL, else ./ledger.db
        a.agent_stickiness()                 # a pandas DataFrame
        a.cache_hits(Filters(actors=["planner"], key_sent=True))
        a.sql("SELECT * FROM calls WHERE fell_back")

Designed to be held for a process's lifetime (a dashboard's cached resource):
Money columns hold ``Decimal`` values (exact, as in the ledger); timestamps
are tz-aware UTC. One DuckDB connection, a fresh cursor per query (a DuckDB connection is not
safe to share between threads, its cursors are), and :meth:`refresh` that
costs two index lookups when the ledger has nothing new.

Every query reads only (:mod:`ledger.analytics.read.readonly`). Opening checks the
ledger first (:func:`~ledger.store.migrate.check_ledger`: missing, unmigrated,
unreachable) and creates nothing when it is unfit. When another process holds
the DuckDB file (a running dashboard), the object works on a private
in-memory copy of the ledger instead, unless ``allow_memory=False``.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import duckdb
import pandas as pd  # type: ignore[import-untyped]
from sqlalchemy.engine import URL

from ledger.analytics.copy import local
from ledger.analytics.copy.bulk import ProgressCallback
from ledger.analytics.copy.source import LedgerSource
from ledger.analytics.copy.sync import (
    SyncResult,
    ensure_aggregates,
    sync,
    sync_snapshot,
)
from ledger.analytics.copy.verify import Verification, verify
from ledger.analytics.models import verdict_sentences, views
from ledger.analytics.models.views import Filters
from ledger.analytics.read import experiment, figures, prices
from ledger.analytics.read.experiment import Effect
from ledger.analytics.read.readonly import check_read_only
from ledger.analytics.read.verdict import Verdict, from_row
from ledger.analytics.settings import AnalyticsSettings, analytics_path_for
from ledger.errors import ReadOnlyQuery
from ledger.store.engine import display_url
from ledger.store.migrate import check_ledger

#: Seconds to wait for another process to release the analytics file.
DEFAULT_LOCK_TIMEOUT_S = 3.0


class Analytics:
    """The ledger's analytics: the synced ``token_usage`` copy and every view.

    ``url``: the ledger (default ``LEDGER_DATABASE_URL``, else ``./ledger.db``).
    ``path``: the DuckDB file (default :func:`analytics_path_for`).
    ``settings``: stored in the file when given; otherwise the file's own (or
    the defaults) apply. ``sync``: bring the copy up to date on open.
    ``allow_memory``: when another process holds the file (DuckDB then refuses
    even a read-only open), work on a private in-memory copy of the ledger, as
    the ``ledger`` commands do; False raises :class:`AnalyticsBusy` instead.
    ``memory_limit``: DuckDB's memory cap for the file (it spills beyond it).
    """

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        path: Path | None = None,
        settings: AnalyticsSettings | None = None,
        sync: bool = True,
        progress: ProgressCallback | None = None,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT_S,
        allow_memory: bool = True,
        memory_limit: str = local.DEFAULT_MEMORY_LIMIT,
    ) -> None:
        self.url = check_ledger(url)
        self._source = LedgerSource(self.url)
        self.path = path if path is not None else analytics_path_for(self.url)
        self._con, self.in_memory = local.open_file(
            self.path,
            lock_timeout=lock_timeout,
            allow_memory=allow_memory,
            memory_limit=memory_limit,
        )
        # what the file was opened with (none for the in-memory stand-in): a bulk sync
        # lowers DuckDB's limit while it copies and sets this one back
        self._memory_limit = None if self.in_memory else memory_limit
        self._lock = threading.Lock()
        # the verdict's sentences table may not match the figures: written before the
        # next SQL read and on close (ledger.analytics.models.verdict_sentences)
        self._sentences_stale = True
        try:
            local.ensure_schema(self._con)
            local.write_settings(self._con, settings, overwrite=True)
            views.install(self._con)
            ensure_aggregates(self._con)
            prices.refresh(self._con)
            self.last_sync: SyncResult | None = self.refresh(progress=progress) if sync else None
        except BaseException:
            self._con.close()
            self._source.close()
            raise

    # -- lifecycle -----------------------------------------------------------

    def close(self) -> None:
        try:
            if not self.in_memory:  # a DuckDB client of the file reads them next
                self._write_sentences()
        finally:
            self._con.close()
        self._source.close()

    def __enter__(self) -> Analytics:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def refresh(
        self, *, full: bool = False, progress: ProgressCallback | None = None
    ) -> SyncResult:
        """Copy the ledger's new rows into the file; ``full`` rebuilds the copy."""
        with self._lock:
            cursor = self._con.cursor()
            try:
                self.last_sync = sync(
                    cursor,
                    self._source,
                    full=full,
                    progress=progress,
                    memory_limit=self._memory_limit,
                )
                if not self.last_sync.up_to_date_already:
                    prices.refresh(cursor)  # the new rows' models, priced for switch_costs
                    self._sentences_stale = True
            finally:
                cursor.close()
            return self.last_sync

    def verify(self) -> Verification:
        """Bring the copy up to the ledger and compare them figure by figure, both in one
        snapshot of the ledger, so rows written meanwhile are not differences
        (:mod:`ledger.analytics.copy.verify`)."""
        with self._lock, self._source.snapshot() as snapshot:
            cursor = self._con.cursor()
            try:
                self.last_sync = sync_snapshot(
                    cursor,
                    snapshot,
                    display_url(self._source.url),
                    memory_limit=self._memory_limit,
                )
                if not self.last_sync.up_to_date_already:
                    prices.refresh(cursor)
                    self._sentences_stale = True
                return verify(cursor, snapshot)
            finally:
                cursor.close()

    # -- settings ------------------------------------------------------------

    @property
    def settings(self) -> AnalyticsSettings:
        return local.read_settings(self._con.cursor())

    def configure(self, settings: AnalyticsSettings) -> None:
        """Store new thresholds; every view uses them from the next query on."""
        with self._lock:
            local.write_settings(self._con.cursor(), settings, overwrite=True)
            self._sentences_stale = True

    # -- queries -------------------------------------------------------------

    def sql(self, query: str, parameters: list[Any] | dict[str, Any] | None = None) -> pd.DataFrame:
        """Any reading DuckDB query over ``token_usage`` and the views, as a DataFrame.

        Raises :class:`~ledger.errors.ReadOnlyQuery` (naming the statement kind)
        for anything that would change the copy, ``ValueError`` for an empty query.
        """
        check_read_only(query)
        self._write_sentences()
        return self._read(query, parameters, read_only=True)

    def _read(
        self,
        query: str,
        parameters: list[Any] | dict[str, Any] | None,
        *,
        read_only: bool = False,
    ) -> pd.DataFrame:
        """``query`` on a fresh cursor; ``read_only``: inside a READ ONLY transaction.

        The views' own queries (module constants) skip the transaction: its
        BEGIN and ROLLBACK cost a few hundred microseconds per dashboard figure.
        """
        cursor = self._con.cursor()
        try:
            if read_only:
                cursor.execute("BEGIN TRANSACTION READ ONLY")
            try:
                relation = cursor.sql(query, params=parameters)
                if relation is None:
                    return pd.DataFrame()
                # Through Arrow rather than .df(): DECIMAL money stays Decimal.
                return relation.to_arrow_table().to_pandas()
            except duckdb.TransactionException as exc:
                if not read_only or "read-only" not in str(exc):
                    raise
                # A write the parse cannot see (a DELETE inside a WITH): the same refusal.
                raise ReadOnlyQuery(
                    "a statement that writes is refused: ad hoc SQL only reads the "
                    f"analytics copy ({exc})",
                    statement="SELECT with a write",
                ) from None
            finally:
                if read_only:
                    cursor.execute("ROLLBACK")  # nothing to keep: it only read
        finally:
            cursor.close()

    def relation(
        self, query: str, parameters: Mapping[str, object] | None = None
    ) -> duckdb.DuckDBPyRelation:
        """A lazy DuckDB relation on its own cursor (for streaming or re-export); reads only."""
        check_read_only(query)
        self._write_sentences()
        return self._con.cursor().sql(query, params=dict(parameters or {}))

    def view(self, name: str, filters: Filters | None = None) -> pd.DataFrame:
        """View ``name`` over every row, or over the rows ``filters`` selects
        (the small views in the fixed order of ``views.VIEW_ORDER``)."""
        if name == "provider_order_verdict":  # its sentences, written from these figures
            return self.provider_order_verdict(filters)
        order = views.VIEW_ORDER.get(name)
        suffix = f" ORDER BY {order}" if order else ""
        return self._over(name, filters, f'SELECT * FROM "{name}"{suffix}')  # noqa: S608

    def _over(
        self,
        name: str,
        filters: Filters | None,
        select: str,
        parameters: dict[str, Any] | None = None,
    ) -> pd.DataFrame:
        """``select`` (reading ``name``, what it depends on, and ``token_usage``) over
        every row through the stored views, or over the rows ``filters`` selects."""
        views.view_sql(name)  # raises KeyError naming the views on a typo
        if filters is None or filters.empty:
            # Fast path: the stored views, read from the aggregates sync keeps.
            return self._read(select, parameters or None)
        if select.lstrip().upper().startswith("WITH"):
            # filtered_query puts its own CTEs first; a nested WITH still sees them.
            select = f"SELECT * FROM ({select})"  # noqa: S608 (module constants)
        return self._read(
            views.filtered_query(name, select), {**filters.parameters(), **(parameters or {})}
        )

    def recommendations(self) -> dict[str, dict[str, Any]]:
        """The ``provider`` object of every warranted verdict, by model."""
        verdicts = self.provider_order_verdict()
        warranted = verdicts[verdicts["recommendation"].notna()]
        return {
            str(row.requested_model): json.loads(str(row.recommendation))
            for row in warranted.itertuples(index=False)
        }

    def experiment(self, policy_id: int) -> experiment.Effect:
        """What routing policy ``policy_id`` did: treatment against holdout
        (:mod:`ledger.analytics.read.experiment`)."""
        sessions, p95, _ = experiment.read_sums(self._read, policy_id)
        return experiment.effect(sessions, p95)

    def experiment_by_agent(self, policy_id: int) -> dict[str | None, Effect]:
        """:meth:`experiment` per agent (``actor_id``): what the policy did to each."""
        sessions, _, p95 = experiment.read_sums(self._read, policy_id)
        return experiment.effects_by_agent(sessions, p95)

    def cache_hits_by_agent(self, filters: Filters | None = None) -> pd.DataFrame:
        """``cache_hits`` summed over upstreams: one row per agent, model and key_sent."""
        return self._over("cache_hits", filters, figures.CACHE_HITS_BY_AGENT)

    def calls(self, filters: Filters | None = None) -> pd.DataFrame:
        return self.view("calls", filters)

    def transitions(self, filters: Filters | None = None) -> pd.DataFrame:
        return self.view("transitions", filters)

    def session_stickiness(self, filters: Filters | None = None) -> pd.DataFrame:
        return self.view("session_stickiness", filters)

    def agent_stickiness(self, filters: Filters | None = None) -> pd.DataFrame:
        return self.view("agent_stickiness", filters)

    def cache_hits(self, filters: Filters | None = None) -> pd.DataFrame:
        return self.view("cache_hits", filters)

    def upstream_scorecard(self, filters: Filters | None = None) -> pd.DataFrame:
        return self.view("upstream_scorecard", filters)

    def cost_attribution(self, filters: Filters | None = None) -> pd.DataFrame:
        return self.view("cost_attribution", filters)

    def provider_order_verdict(self, filters: Filters | None = None) -> pd.DataFrame:
        """``provider_order_verdict``, one row per model in model order (every run alike);
        ``headline`` and ``reason`` written from these rows' own figures."""
        typed = self._over("verdict_figures", filters, figures.VERDICTS)
        return verdict_sentences.with_sentences(typed)

    def verdicts(self, filters: Filters | None = None) -> list[Verdict]:
        """The verdict of every model, typed (:class:`~ledger.analytics.read.verdict.Verdict`)."""
        typed = self._over("verdict_figures", filters, figures.VERDICTS)
        return [from_row(row) for row in typed.to_dict("records")]

    def _write_sentences(self) -> None:
        """Bring ``verdict_sentences`` up to the figures, for readers of the view in SQL."""
        with self._lock:
            if self._sentences_stale:
                verdict_sentences.write_table(self._con)
                self._sentences_stale = False

    def switch_costs(self, filters: Filters | None = None) -> pd.DataFrame:
        """``switch_costs``: by model, agent and day, in that order."""
        return self._over("switch_costs", filters, figures.SWITCH_COSTS)

    def switch_cost_totals(self, filters: Filters | None = None) -> figures.SwitchCostTotals:
        """``switch_costs`` summed over the ledger (or the filtered rows)."""
        return figures.switch_totals_from(
            self._over("switch_costs", filters, figures.SWITCH_COST_TOTALS)
        )

    def cache_decay(self, filters: Filters | None = None) -> pd.DataFrame:
        """``cache_decay``: by model, shortest gaps first."""
        return self._over("cache_decay", filters, figures.CACHE_DECAY)

    # -- figures for the dashboard and the demo ------------------------------

    def ledger_options(self) -> figures.LedgerOptions:
        """What the whole ledger holds: row count, time span, agents, models, providers."""
        return figures.options_from(self._read(figures.OPTIONS, None))

    def overview_totals(self, filters: Filters | None = None) -> dict[str, Any]:
        """Calls, spend, fallbacks and failures (the ``overview_totals`` view) as a dict."""
        return figures.totals_from(self.view("overview_totals", filters))

    def timeline(self, filters: Filters | None, bucket: dt.timedelta) -> pd.DataFrame:
        """Per ``bucket`` of time: calls, spend, fallbacks, response-cache hits, failures."""
        seconds = int(bucket.total_seconds())
        return self._over("calls", filters, figures.TIMELINE, {"bucket": f"{seconds} seconds"})

    def spend_over_time(
        self, filters: Filters | None, bucket: dt.timedelta, by: str = "requested_model"
    ) -> pd.DataFrame:
        """Per ``bucket`` of time and model (``by="requested_model"``) or agent
        (``by="actor_id"``): calls and spend."""
        if by not in figures.SPEND_OVER_TIME:
            raise ValueError(f"by must be one of {', '.join(figures.SPEND_OVER_TIME)}, not {by!r}")
        seconds = int(bucket.total_seconds())
        query = figures.SPEND_OVER_TIME[by]
        return self._over("calls", filters, query, {"bucket": f"{seconds} seconds"})

    def prompt_cache_saving(self, filters: Filters | None = None) -> figures.Saving:
        """What prompt-cache reads saved at list prices (genai-prices)."""
        return figures.prompt_cache_saving(self.view("prompt_cache_reads", filters))

    def response_cache_saving(self, filters: Filters | None = None) -> figures.Saving:
        """Response-cache hits times the mean known cost of a served call of the same model."""
        return figures.response_cache_saving(self.view("response_cache_models", filters))

    def cost_by_agent(self, filters: Filters | None = None) -> pd.DataFrame:
        """``cost_by_agent``, dearest first."""
        return self._over("cost_by_agent", filters, figures.COST_BY_AGENT)

    def fallback_cost(self, filters: Filters | None = None) -> pd.DataFrame:
        """``fallback_cost``, dearest first."""
        return self._over("fallback_cost", filters, figures.FALLBACK_COST)

    def estimated_vs_billed(self, filters: Filters | None = None) -> pd.DataFrame:
        """Per UTC day: rows, reconciled rows, rows awaiting a bill, the estimate (all rows
        and reconciled rows) and the billed cost of the reconciled rows."""
        return self._over("calls", filters, figures.ESTIMATED_VS_BILLED)

    def failed_attempts(self, filters: Filters | None = None) -> pd.DataFrame:
        """``failed_attempts``, most frequent first."""
        return self._over("failed_attempts", filters, figures.FAILED_ATTEMPTS)

    def cache_decay_by_key(self, filters: Filters | None = None) -> pd.DataFrame:
        """``cache_decay_by_key``, shortest gaps first, keyed attempts before keyless ones."""
        return self._over("cache_decay_by_key", filters, figures.CACHE_DECAY_BY_KEY)

    def top_sessions(self, filters: Filters | None = None, limit: int = 200) -> pd.DataFrame:
        """The sessions worth a look first: most switches, then idle releases, then calls."""
        return self._over("session_stickiness", filters, figures.TOP_SESSIONS, {"limit": limit})

    def session_attempts(
        self, filters: Filters | None, session_id: str, actor_id: str | None, model: str
    ) -> pd.DataFrame:
        """Every attempt of one session (failed and response-cache ones included), in order."""
        key = {"session_id": session_id, "actor_id": actor_id, "model": model}
        return self._over("calls", filters, figures.SESSION_ATTEMPTS, key)

    def session_moves(
        self, filters: Filters | None, session_id: str, actor_id: str | None, model: str
    ) -> pd.DataFrame:
        """One session's switches and idle releases (from ``transitions``)."""
        key = {"session_id": session_id, "actor_id": actor_id, "model": model}
        return self._over("transitions", filters, figures.SESSION_MOVES, key)
