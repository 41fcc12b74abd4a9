"""The views of contract §2: their SQL files, their order, and filtered reads.

Each view is one ``sql/<name>.sql`` file holding a documented
``CREATE OR REPLACE VIEW <name> AS …`` over ``token_usage`` or other views: the
definition. An intermediate the state layer keeps says so in its file
(``-- materialized: state_table``, :func:`materialized_as`): over every row it
reads that table, which sync keeps by folding the same text over new rows; the
metrics over it are one text for filtered and unfiltered reads. Views not yet
moved onto such intermediates still have ``sql/stored/<name>.sql``: the same
rows and columns read from the state tables
(:mod:`ledger.analytics.state.aggregates`). :func:`install` (re)creates them
all in the DuckDB file, in dependency order, so any DuckDB client sees them
and they answer in well under a second. Which
views a view reads is derived from the texts (:mod:`ledger.analytics.models.graph`),
never listed by hand: adding a view is adding its file.

A filtered read (a time range, some agents…) must filter *rows* before the
metrics are computed, not the finished view. :func:`filtered_query` does it
without touching the SQL: it wraps the view's body and the bodies of the views
it depends on as CTEs under a ``token_usage`` CTE that holds only the wanted
rows (a CTE shadows the table of the same name), with the filter values bound
as parameters.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any, Final

import duckdb

from ledger.analytics.models import graph, verdict_sentences
from ledger.schema import TABLE_NAME

_SQL: Final = resources.files("ledger.analytics").joinpath("sql")
_CREATE = re.compile(r"CREATE OR REPLACE VIEW\s+(\w+)\s+AS\s+(.*?);?\s*\Z", re.DOTALL | re.I)


def _body(name: str, sql: str) -> str:
    text = "\n".join(line for line in sql.splitlines() if not line.startswith("--"))
    match = _CREATE.search(text)
    if match is None or match.group(1) != name:
        raise ValueError(f"the SQL of {name} must hold one CREATE OR REPLACE VIEW {name} AS …")
    return match.group(2)


def _texts(folder: Traversable) -> dict[str, str]:
    """``name: SELECT`` of every ``<name>.sql`` in ``folder``."""
    return {
        file.name.removesuffix(".sql"): _body(
            file.name.removesuffix(".sql"), file.read_text("utf-8")
        )
        for file in folder.iterdir()
        if file.name.endswith(".sql")
    }


_ROW_BODIES: Final = _texts(_SQL)
_STORED_BODIES: Final = _texts(_SQL.joinpath("stored"))
#: The views each view's definition (``sql/<name>.sql``) reads: what a filtered read
#: and the lake computing from rows put before it.
ROW_PARENTS: Final = {name: graph.parents(body, _ROW_BODIES) for name, body in _ROW_BODIES.items()}


def _dependencies() -> dict[str, tuple[str, ...]]:
    """Each view's parents in its definition or its stored variant, in creation order."""
    union = {
        name: ROW_PARENTS[name] | graph.parents(_STORED_BODIES.get(name, body), _ROW_BODIES)
        for name, body in _ROW_BODIES.items()
    }
    return {name: tuple(sorted(union[name])) for name in graph.creation_order(union)}


#: Every view and the views its SQL reads (its definition's and its stored variant's),
#: derived from the texts (:mod:`ledger.analytics.models.graph`), in creation order.
VIEW_DEPENDENCIES: Final = _dependencies()
VIEW_NAMES: Final = tuple(VIEW_DEPENDENCIES)
#: The views contract §2 names; the others are ours (helpers and dashboard figures).
CONTRACT_VIEWS: Final = (
    "calls",
    "session_stickiness",
    "agent_stickiness",
    "cache_hits",
    "upstream_scorecard",
    "cost_attribution",
    "provider_order_verdict",
    "switch_costs",
    "cache_decay",
)
HELPER_VIEWS: Final = tuple(v for v in VIEW_NAMES if v not in CONTRACT_VIEWS)
#: The order :meth:`Analytics.view` returns the small views' rows in (their keys), so
#: the same ledger gives the same frames every run; the per-row and per-session
#: views stay unordered (sorting millions of rows is the caller's choice).
VIEW_ORDER: Final[dict[str, str]] = {
    "agent_stickiness": "actor_id NULLS LAST, requested_model, key_sent DESC",
    "cache_hits": "actor_id NULLS LAST, requested_model, upstream NULLS LAST, key_sent DESC",
    "upstream_scorecard": "requested_model, upstream NULLS LAST",
    "cost_attribution": "requested_provider, responding_provider NULLS LAST, requested_model",
    "provider_order_verdict": "requested_model",
    "switch_costs": "requested_model, actor_id NULLS LAST, day",
    "cache_decay": "requested_model, gap_order",
    "cache_economics": "actor_id NULLS LAST, requested_model, provider, upstream",
    "cache_ttl_advice": "actor_id NULLS LAST, requested_model, provider",
}

# The rows a filtered read keeps. A NULL parameter means "no filter on this".
_FILTERED_ROWS: Final = f"""
SELECT * FROM main.{TABLE_NAME}
WHERE (CAST($start AS TIMESTAMPTZ) IS NULL OR started_at >= CAST($start AS TIMESTAMPTZ))
  AND (CAST($end AS TIMESTAMPTZ) IS NULL OR started_at < CAST($end AS TIMESTAMPTZ))
  AND (CAST($actors AS VARCHAR[]) IS NULL OR list_contains(CAST($actors AS VARCHAR[]), actor_id))
  AND (CAST($models AS VARCHAR[]) IS NULL
       OR list_contains(CAST($models AS VARCHAR[]), requested_model))
  AND (CAST($providers AS VARCHAR[]) IS NULL
       OR list_contains(CAST($providers AS VARCHAR[]), provider))
  AND (CAST($key_sent AS BOOLEAN) IS NULL
       OR (session_key IS NOT NULL) = CAST($key_sent AS BOOLEAN))
"""  # noqa: S608


@dataclass(frozen=True, slots=True, kw_only=True)
class Filters:
    """Which ledger rows the metrics are computed over; ``None`` leaves a field open.

    ``start`` is inclusive and ``end`` exclusive (tz-aware); ``actors``,
    ``models`` and ``providers`` match ``actor_id``, ``requested_model`` and
    ``provider``; ``key_sent`` keeps rows sent with (True) or without (False)
    a sticky key.
    """

    start: dt.datetime | None = None
    end: dt.datetime | None = None
    actors: Sequence[str] | None = None
    models: Sequence[str] | None = None
    providers: Sequence[str] | None = None
    key_sent: bool | None = None

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                raise ValueError(f"{name} must be timezone-aware, got {value!r}")

    @property
    def empty(self) -> bool:
        return all(getattr(self, f) is None for f in self.__slots__)

    def parameters(self) -> dict[str, Any]:
        def listed(values: Sequence[str] | None) -> list[str] | None:
            return None if values is None else list(values)

        return {
            "start": self.start,
            "end": self.end,
            "actors": listed(self.actors),
            "models": listed(self.models),
            "providers": listed(self.providers),
            "key_sent": self.key_sent,
        }


@cache
def view_sql(name: str) -> str:
    """The full text of ``sql/<name>.sql``."""
    if name not in VIEW_DEPENDENCIES:
        raise KeyError(f"unknown view {name!r}; the views are {', '.join(VIEW_NAMES)}")
    return resources.files("ledger.analytics").joinpath("sql", f"{name}.sql").read_text("utf-8")


def view_body(name: str) -> str:
    """The SELECT a view is defined as (its file, minus ``CREATE … AS`` and comments)."""
    return _body(name, view_sql(name))


def stored_view_body(name: str) -> str:
    """The SELECT of the view as stored beside the state tables (:func:`stored_view_sql`)."""
    return _body(name, stored_view_sql(name))


@cache
def stored_view_sql(name: str) -> str:
    """The view as the analytics file holds it: over the table it is materialized as
    (:func:`materialized_as`), else ``sql/stored/<name>.sql`` where a view still has a
    stored variant, else its definition."""
    table = materialized_as(name)
    if table is not None:
        # names from our own SQL files (\w+ only), never from input
        return f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM {table};"  # noqa: S608
    stored = resources.files("ledger.analytics").joinpath("sql", "stored", f"{name}.sql")
    return stored.read_text("utf-8") if stored.is_file() else view_sql(name)


_MATERIALIZED: Final = re.compile(r"^-- materialized: (\w+)\s*$", re.M)


def materialized_as(name: str) -> str | None:
    """The state table a view's definition says it is kept as (``-- materialized: TABLE``).

    Such a view is an intermediate the state layer keeps by folding the view's own
    text over new rows (:mod:`ledger.analytics.state.rollup`); a filtered read runs the
    text itself over the filtered rows.
    """
    match = _MATERIALIZED.search(view_sql(name))
    return None if match is None else match.group(1)


# Which views the file holds: the digest of the SQL install() ran, and of the
# views' text as DuckDB keeps it just after (another version of this code that
# recreated them, unaware of this table, changes the latter).
_INSTALLED_DDL: Final = (
    "CREATE TABLE IF NOT EXISTS ledger_view_digests "
    "(digest VARCHAR NOT NULL, held VARCHAR NOT NULL)"
)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@cache
def _digest() -> str:
    return _sha256("\n".join(f"{name}\n{stored_view_sql(name)}" for name in VIEW_NAMES))


def _held(con: duckdb.DuckDBPyConnection) -> str:
    """A digest of the views' definitions as the file holds them now."""
    rows = con.execute(
        "SELECT view_name, sql FROM duckdb_views() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND list_contains(CAST(? AS VARCHAR[]), view_name) "
        "ORDER BY view_name",
        [list(VIEW_NAMES)],
    ).fetchall()
    return _sha256("\n".join(f"{name}\n{sql}" for name, sql in rows))


def install(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)create every view in the file, dependencies first (the state tables must exist).

    Binding the views' SQL takes DuckDB about half a second (the verdict alone
    a tenth), paid on every open, which is every dashboard start: so a file
    whose views came from this version's SQL and were not changed since keeps them.
    """
    con.execute(_INSTALLED_DDL)
    con.execute(verdict_sentences.DDL)  # a table provider_order_verdict reads
    if con.execute("SELECT digest, held FROM ledger_view_digests").fetchall() == [
        (_digest(), _held(con))
    ]:
        return
    for name in VIEW_NAMES:
        con.execute(stored_view_sql(name))
    con.execute("DELETE FROM ledger_view_digests")
    con.execute("INSERT INTO ledger_view_digests VALUES (?, ?)", [_digest(), _held(con)])


def _closure(name: str) -> list[str]:
    """``name`` and everything it reads, dependencies first."""
    ordered: list[str] = []

    def visit(view: str) -> None:
        for dep in sorted(ROW_PARENTS[view]):
            visit(dep)
        if view not in ordered:
            ordered.append(view)

    visit(name)
    return ordered


def filtered_query(name: str, select: str | None = None) -> str:
    """A query over view ``name`` computed from the rows :class:`Filters` parameters select.

    It uses the definitions (``sql/<name>.sql``), never the state tables,
    which hold aggregates over every row.

    ``select`` (default ``SELECT * FROM <name>``) is the statement run over it.
    """
    ctes = [f"{TABLE_NAME} AS ({_FILTERED_ROWS})"]
    ctes += [f"{view} AS ({view_body(view)})" for view in _closure(name)]
    return f"WITH {', '.join(ctes)} {select or f'SELECT * FROM {name}'}"  # noqa: S608
