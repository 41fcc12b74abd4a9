"""The views' dependency graph, read from their SQL: which views a view's SELECT reads.

A list kept by hand beside the SQL drifts from it (it had: several views read
another view the list did not name, and were created in the right order only
by luck of the list's order). The graph is therefore derived, with sqlglot,
from the texts themselves: a view's *parents* are the relations its SELECT
reads that are other views (a CTE of the same name shadows a relation, so CTE
names are not parents). :func:`creation_order` sorts the views so each comes
after its parents, and refuses a cycle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache

import sqlglot
from sqlglot import exp


class ViewCycle(ValueError):
    """The views' SQL reads in a circle: no creation order exists (a bug in ``sql/``)."""


@cache
def relations_read(select: str) -> frozenset[str]:
    """The tables and views DuckDB SELECT ``select`` reads, its own CTEs left out."""
    tree = sqlglot.parse_one(select, read="duckdb")
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    return frozenset(table.name for table in tree.find_all(exp.Table) if table.name not in ctes)


def parents(select: str, views: Iterable[str]) -> frozenset[str]:
    """The views among ``views`` that ``select`` reads."""
    return relations_read(select) & frozenset(views)


def creation_order(graph: Mapping[str, Iterable[str]]) -> tuple[str, ...]:
    """Every view after its parents; among views free to go, alphabetical order.

    Raises :class:`ViewCycle` naming the views left in a cycle.
    """
    waiting = {name: set(graph[name]) for name in graph}
    ordered: list[str] = []
    while waiting:
        ready = sorted(name for name, needs in waiting.items() if not needs)
        if not ready:
            raise ViewCycle(f"the views {', '.join(sorted(waiting))} read each other in a cycle")
        for name in ready:
            del waiting[name]
            ordered.append(name)
        for needs in waiting.values():
            needs.difference_update(ready)
    return tuple(ordered)
