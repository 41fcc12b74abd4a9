"""Ad hoc SQL reads the analytics copy and never changes it, nor anything else.

The copy is the ledger's rows plus the aggregates sync keeps from them, and
sync only ever appends: a ``DELETE`` or ``UPDATE`` run against it would never
be undone, and the views would disagree with the ledger from then on. Three
doors, each closed on its own, so a statement one of them misses still cannot
write:

1. DuckDB's own parser splits the query, and every statement must read
   (``SELECT``, which covers ``WITH``, ``FROM``-first, ``VALUES``, ``DESCRIBE``,
   ``SHOW``, ``SUMMARIZE``). ``EXPLAIN [ANALYZE]`` runs the statement it wraps, so
   that statement is parsed and held to the same rule (``EXPLAIN ANALYZE COPY … TO``
   would otherwise write a file).
2. The connection is opened without external access (:mod:`ledger.analytics.copy.local`):
   no file is read or written, no extension installed or loaded, no database
   attached, and that cannot be turned back on while it is open.
3. What passes runs inside a ``READ ONLY`` transaction (:meth:`Analytics.sql`).
"""

from __future__ import annotations

from typing import Final

import duckdb

from ledger.errors import ReadOnlyQuery

#: Statement kinds that only read.
READING: Final = frozenset({duckdb.StatementType.SELECT})


def check_read_only(query: str) -> None:
    """Raise :class:`ReadOnlyQuery` unless every statement of ``query`` only reads.

    Raises ``ValueError`` when ``query`` holds no statement at all (empty, or
    only a comment) and DuckDB's own ``ParserException`` when it does not parse.
    """
    statements = _parse(query)
    if not statements:
        raise ValueError("the query is empty: give one SELECT statement (or several)")
    for statement in statements:
        _check(statement, within="")


def _parse(query: str) -> list[duckdb.Statement]:
    return duckdb.extract_statements(query)


def _kind(statement: duckdb.Statement) -> duckdb.StatementType:
    try:
        return statement.type
    except ValueError:
        # DuckDB parsed a statement whose kind its Python API has no name for
        # (UPDATE EXTENSIONS, say): nothing that reads.
        raise ReadOnlyQuery(
            "a statement of a kind DuckDB's Python API cannot name is refused: ad hoc SQL "
            "only reads",
            statement="unnamed",
        ) from None


def _check(statement: duckdb.Statement, *, within: str) -> None:
    kind = _kind(statement)
    if kind == duckdb.StatementType.EXPLAIN:
        _check(_explained(statement.query), within=" (inside EXPLAIN)")
    elif kind not in READING:
        raise ReadOnlyQuery(
            f"{kind.name} statements are refused{within}: ad hoc SQL only reads the analytics "
            "copy, which sync rebuilds from the ledger and would never repair after an edit "
            "(to change a threshold, use Analytics.configure())",
            statement=kind.name,
        )


def _explained(text: str) -> duckdb.Statement:
    """The statement an ``EXPLAIN`` wraps, parsed: what follows ``EXPLAIN``, an
    optional ``ANALYZE`` and an optional parenthesised option list. Positions come
    from DuckDB's tokenizer, so comments and strings cannot pose as either."""
    tokens = [at for at, kind in duckdb.tokenize(text) if kind != duckdb.token_type.comment]
    rest = tokens[1:]  # tokens[0] is EXPLAIN itself
    if rest and text[rest[0] :].upper().startswith(("ANALYZE", "ANALYSE")):
        rest = rest[1:]
    if not rest:
        raise ReadOnlyQuery("EXPLAIN of nothing is refused", statement="EXPLAIN")
    try:
        wrapped = _parse(text[rest[0] :])
    except duckdb.ParserException:
        if not text.startswith("(", rest[0]):
            raise
        # not a parenthesised statement: an option list, (FORMAT json) say
        wrapped = _parse(text[_after_group(text, rest) :])
    if len(wrapped) != 1:
        raise ReadOnlyQuery("EXPLAIN must wrap one statement", statement="EXPLAIN")
    return wrapped[0]


def _after_group(text: str, tokens: list[int]) -> int:
    """Where the text after the parenthesised group opening at ``tokens[0]`` starts."""
    depth = 0
    for index, at in enumerate(tokens):
        depth += {"(": 1, ")": -1}.get(text[at], 0)
        if depth == 0:
            return tokens[index + 1] if index + 1 < len(tokens) else len(text)
    return len(text)
