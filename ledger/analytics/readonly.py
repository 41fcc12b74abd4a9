"""Ad hoc SQL reads the analytics copy and never changes it.

The copy is the ledger's rows plus the aggregates sync keeps from them, and
sync only ever appends: a ``DELETE`` or ``UPDATE`` run against it would never
be undone, and the views would disagree with the ledger from then on. So a
query is parsed first and refused, naming its statement kind, unless every
statement in it only reads; what passes then runs inside a DuckDB
``READ ONLY`` transaction, which stops anything the parse cannot see (the
``DELETE`` inside ``EXPLAIN ANALYZE``, say).

Reading is not confined to the copy: DuckDB's table functions read local
files (``read_csv('/etc/hosts')``) with the permissions of whoever runs the
query, as the ``duckdb`` shell does. Extensions are never installed or loaded
on the fly (see :mod:`ledger.analytics.local`).
"""

from __future__ import annotations

from typing import Final

import duckdb

from ledger.errors import ReadOnlyQuery

#: Statement kinds that only read: SELECT covers WITH, FROM-first, VALUES,
#: DESCRIBE, SHOW and SUMMARIZE; EXPLAIN runs in the read-only transaction.
READING: Final = frozenset({duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN})


def check_read_only(query: str) -> None:
    """Raise :class:`ReadOnlyQuery` unless every statement of ``query`` only reads.

    Raises ``ValueError`` when ``query`` holds no statement at all (empty, or
    only a comment) and DuckDB's own ``ParserException`` when it does not parse.
    """
    statements = duckdb.extract_statements(query)
    if not statements:
        raise ValueError("the query is empty: give one SELECT statement (or several)")
    for statement in statements:
        if statement.type not in READING:
            kind = statement.type.name
            raise ReadOnlyQuery(
                f"{kind} statements are refused: ad hoc SQL only reads the analytics copy, "
                "which sync rebuilds from the ledger and would never repair after an edit "
                "(to change a threshold, use Analytics.configure())",
                statement=kind,
            )
