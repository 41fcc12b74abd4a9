"""The one definition of the ``token_usage`` table (contract §1).

Everything that touches the table's shape starts here: the Alembic migrations
are generated from this module and a test checks they still agree with it; the
writer compiles its INSERT from it; the analytics layer reads its column list.

Two column types need care to round-trip identically on SQLite and PostgreSQL:

* ``started_at`` is ``timestamp with time zone``. SQLite has no such type, so
  :class:`UTCDateTime` stores naive UTC there and re-attaches UTC on read;
  every value handed back is tz-aware UTC on both backends.
* ``cost_usd`` is ``numeric(20, 10)``. PostgreSQL stores it exactly. SQLite
  keeps numerics as REAL (a double), so :class:`Money` reads them back as
  ``Decimal`` quantised to ten places. A double round-trips any decimal of at
  most 15 significant digits, so a cost below 100,000 USD (five integer digits
  plus ten decimals) comes back exactly; a larger one keeps 15 significant
  digits (:data:`SQLITE_EXACT_COST_BELOW`). Storing text or integer
  nanodollars instead would make every ``sum(cost_usd)`` a user or DuckDB runs
  on the file wrong or a string, for digits no single attempt's cost has.

Token counts are ``bigint``: a count that overflowed 32 bits would otherwise be
clamped, and priced, silently. ``usage_reported`` says whether the token
columns hold the provider's usage for the whole attempt (false: it reported
none, or the attempt ended before its final usage; the counts are then what
was seen, usually 0, and never a real zero). A flag rather than NULL tokens:
the columns stay ``NOT NULL`` integers for every reader, sums stay sums, and
rows written before the column existed are backfilled true, which is what they
claimed.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any, Final

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    Numeric,
    SmallInteger,
    String,
    Table,
    UniqueConstraint,
    false,
    text,
    true,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

TABLE_NAME: Final = "token_usage"

# Stable constraint names make migrations reproducible across backends.
NAMING_CONVENTION: Final = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

COST_SCALE: Final = 10
#: On SQLite (a double) ``cost_usd`` is exact to its ten decimals below this many USD.
SQLITE_EXACT_COST_BELOW: Final = Decimal(100_000)
_COST_QUANTUM: Final = Decimal(1).scaleb(-COST_SCALE)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A ``timestamp with time zone`` that always round-trips as tz-aware UTC."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: the ledger stores tz-aware UTC only")
        value = value.astimezone(dt.UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)


class Money(TypeDecorator[Decimal]):
    """``numeric(20, 10)`` in USD, read back as ``Decimal`` on every backend."""

    impl = Numeric(20, COST_SCALE)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            # Let SQLite hand us the float and convert it ourselves: the stock
            # Decimal conversion on SQLite warns on every first use.
            return dialect.type_descriptor(Numeric(20, COST_SCALE, asdecimal=False))
        return dialect.type_descriptor(Numeric(20, COST_SCALE))

    def process_bind_param(self, value: Decimal | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        return float(value) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> Decimal | None:
        if value is None:
            return None
        if isinstance(value, float):
            return Decimal(repr(value)).quantize(_COST_QUANTUM)
        return Decimal(value).quantize(_COST_QUANTUM)


# SQLite only auto-increments an ``INTEGER PRIMARY KEY`` (the rowid alias).
_BigIntId = BigInteger().with_variant(Integer(), "sqlite")

metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _columns(*, partitioned: bool) -> list[Column[Any]]:
    """The columns, fresh for each table built from them.

    ``partitioned``: PostgreSQL's range-partitioned shape, where the partition key
    ``started_at`` joins ``id`` in the primary key and ``event_id`` is unique
    together with ``started_at`` (PostgreSQL requires the key in every unique
    index of a partitioned table; see :func:`partitioned_token_usage`).
    """
    return [
        Column("id", _BigIntId, primary_key=True, autoincrement=True),
        Column("event_id", String(36), nullable=False, unique=not partitioned),
        Column("call_id", String(36), nullable=False),
        Column("attempt", SmallInteger, nullable=False),
        Column("started_at", UTCDateTime(), nullable=False, primary_key=partitioned),
        Column("latency_ms", Float),
        Column("ttft_ms", Float),
        Column("session_id", String(256)),
        Column("actor_id", String(256)),
        Column("session_key", String(256)),
        Column("requested_provider", String(64), nullable=False),
        Column("requested_model", String(256), nullable=False),
        Column("provider", String(64), nullable=False),
        Column("model", String(256)),
        Column("upstream", String(128)),
        Column("generation_id", String(128)),
        Column("routing_sort", String(32)),
        Column("routing_order", String(512)),
        Column("status", String(16), nullable=False),
        Column("error_type", String(32)),
        Column("http_status", SmallInteger),
        Column("input_tokens", BigInteger, nullable=False, server_default=text("0")),
        Column("output_tokens", BigInteger, nullable=False, server_default=text("0")),
        Column("cache_read_tokens", BigInteger, nullable=False, server_default=text("0")),
        Column("cache_write_tokens", BigInteger, nullable=False, server_default=text("0")),
        Column("reasoning_tokens", BigInteger, nullable=False, server_default=text("0")),
        Column("cost_usd", Money()),
        Column("cost_source", String(16)),
        Column("response_cache_hit", Boolean, nullable=False, server_default=false()),
        Column("streamed", Boolean, nullable=False, server_default=false()),
        Column("paused", Boolean, nullable=False, server_default=false()),
        Column("locale", String(35)),
        Column("tags", JSON),
        Column("usage_reported", Boolean, nullable=False, server_default=true()),
        # The per-modality token split the response reported ({"input": {"audio": n, ...},
        # "cache_read": {...}, "output": {...}}); null when it reported none.
        Column("usage_details", JSON),
        # What the bill says, stored after the fact by ``ledger reconcile`` (never by the
        # writer): cost_usd keeps the estimate made at call time. ``billed_at`` is when the
        # billed figure was stored (null: not reconciled yet); ``billing`` holds the
        # aggregator's other figures (cache discount, upstream cost, native token counts).
        Column("billed_cost_usd", Money()),
        Column("billed_at", UTCDateTime()),
        Column("billing", JSON),
        # The routing policy the attempt was sent under (``routing_policies.id``) and the
        # arm its session was assigned to: ``treatment`` sent the policy's provider object,
        # ``holdout`` sent the request as it was. NULL for rows sent without a policy.
        Column("policy_id", BigInteger),
        Column("arm", String(16)),
        # The upstreams an aggregator's router tried inside the attempt, in order: a list
        # of {"upstream", "status", "latency_ms"} (OpenRouter's router metadata at call
        # time, else its generation record's provider_responses, stored by ``ledger
        # reconcile openrouter``). NULL when not known; the row's ``upstream`` is the one
        # that served.
        Column("router_attempts", JSON),
    ]


token_usage = Table(
    TABLE_NAME,
    metadata,
    *_columns(partitioned=False),
    Index(None, "session_id", "actor_id", "started_at"),
    # BRIN on PostgreSQL: rows arrive in started_at order, so block ranges are
    # tight and the index is a few pages per partition; SQLite keeps a b-tree.
    Index(None, "started_at", postgresql_using="brin"),
    Index(None, "call_id"),
    # Ids are never reused, even after the highest rows are deleted: the
    # analytics copy keys rows by id (PostgreSQL sequences never go back).
    sqlite_autoincrement=True,
)

CHANGES_TABLE: Final = "ledger_changes"

#: The change log: entries naming the inserted, updated or deleted ``token_usage``
#: rows, written in the writing transaction by triggers (migrations 0003, 0007) or
#: by the writer for its own batches (:mod:`ledger.store.sink`). An entry names the
#: ids ``row_id`` to ``coalesce(last_id, row_id)``, every one of them changed (an id
#: in the range without a row is a row that is not there, as after a delete):
#: triggers write one id per entry, the PostgreSQL writer one range per run of
#: consecutive ids in a batch. ``seq`` is the log's own order; readers find what
#: changed since they last looked (see :mod:`ledger.analytics.copy.sync`).
ledger_changes = Table(
    CHANGES_TABLE,
    metadata,
    Column("seq", _BigIntId, primary_key=True, autoincrement=True),
    Column("row_id", BigInteger, nullable=False),
    Column("last_id", BigInteger),
    # No AUTOINCREMENT: SQLite's rowid is max + 1, and nothing deletes the
    # log's newest entries, so a seq is never handed out twice; AUTOINCREMENT
    # would write sqlite_sequence on every logged row.
)

#: The column PostgreSQL partitions ``token_usage`` on, by calendar month (UTC).
PARTITION_KEY: Final = "started_at"


def partitioned_token_usage(target: MetaData, name: str = TABLE_NAME) -> Table:
    """``token_usage`` as PostgreSQL stores it: range-partitioned by month on ``started_at``.

    Same columns and indexes as :data:`token_usage`; only the keys differ,
    because PostgreSQL needs the partition key in every unique index:

    * primary key ``(id, started_at)``: ``id`` still comes from one sequence, so
      it stays unique on its own (the analytics copy keys rows by it);
    * ``event_id`` unique together with ``started_at``. The writer's
      idempotency is unchanged: a replayed event is the same wire row (its
      ``event_id`` and ``started_at`` are fields of one immutable event,
      journaled together), so it hits the same key and is skipped. What is not
      enforced any more is the same ``event_id`` with a *different*
      ``started_at``, which only a hand-made row could carry.

    ``name`` builds the table under another name (``ledger db partition`` fills
    a new table beside the old one, then swaps the names).
    """
    return Table(
        name,
        target,
        *_columns(partitioned=True),
        UniqueConstraint("event_id", PARTITION_KEY),
        Index(None, "session_id", "actor_id", "started_at"),
        Index(None, "started_at", postgresql_using="brin"),
        Index(None, "call_id"),
        postgresql_partition_by=f"RANGE ({PARTITION_KEY})",
    )


def metadata_for(dialect: str) -> MetaData:
    """The tables as ``dialect`` stores them: PostgreSQL's ``token_usage`` is partitioned."""
    if dialect != "postgresql":
        return metadata
    target = MetaData(naming_convention=NAMING_CONVENTION)
    for table in metadata.sorted_tables:
        if table.name == TABLE_NAME:
            partitioned_token_usage(target)
        else:
            table.to_metadata(target)
    return target


#: Columns written after the fact by ``ledger reconcile``, never by the writer.
BILLED_COLUMNS: Final = ("billed_cost_usd", "billed_at", "billing")

#: Column names in table order, without the autoincrement ``id`` and the billed columns.
EVENT_COLUMNS: Final[tuple[str, ...]] = tuple(
    c.name for c in token_usage.columns if c.name != "id" and c.name not in BILLED_COLUMNS
)

#: Maximum length of every bounded string column, for validation at the caller.
STRING_LIMITS: Final[dict[str, int]] = {
    c.name: c.type.length
    for c in token_usage.columns
    if isinstance(c.type, String) and c.type.length is not None
}


#: One row per budget alert: which budget, limit and subject crossed which threshold in
#: which period (the UTC day). The unique key makes "at most one alert per budget per
#: threshold per period" hold across concurrent ``ledger budget`` runs: a run *claims* an
#: alert by inserting its row (``sent_at`` NULL), sets ``sent_at`` once the webhook took
#: it, and deletes its claim when delivery failed, so the next run tries again.
budget_alerts = Table(
    "budget_alerts",
    metadata,
    Column("id", _BigIntId, primary_key=True, autoincrement=True),
    Column("budget", String(256), nullable=False),
    Column("metric", String(16), nullable=False),
    Column("subject", String(256), nullable=False, server_default=text("''")),
    Column("period", Date, nullable=False),
    Column("threshold", String(8), nullable=False),
    Column("spent_usd", Money()),
    Column("limit_usd", Money(), nullable=False),
    Column("claimed_at", UTCDateTime(), nullable=False),
    Column("sent_at", UTCDateTime()),
    UniqueConstraint("budget", "metric", "subject", "period", "threshold"),
)

#: One row per routing policy (``ledger policy``): for one requested model, the
#: OpenRouter ``provider`` object to send, and the share of sessions held out (sent
#: as they were) to measure what it does. Active while ``stopped_at`` is NULL; at most
#: one active policy per model (the partial unique index). Who, when and why are kept
#: for both the start and the stop: a policy is never deleted, its rows name it.
routing_policies = Table(
    "routing_policies",
    metadata,
    Column("id", _BigIntId, primary_key=True, autoincrement=True),
    Column("requested_model", String(256), nullable=False),
    # What the policy changes: ``provider`` (the treatment arm is sent the provider
    # object) or ``session_key`` (the holdout arm is sent without its sticky key).
    Column("kind", String(16), nullable=False, server_default="provider"),
    Column("provider", JSON, nullable=False),
    Column("holdout_share", Float, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("created_by", String(256), nullable=False),
    Column("reason", String(1024)),
    Column("stopped_at", UTCDateTime()),
    Column("stopped_by", String(256)),
    Column("stop_reason", String(1024)),
    # When ``ledger policy check --notify`` posted that it is worse than its holdout
    # (claimed before posting: one alert per policy, however many checkers run).
    Column("worse_alerted_at", UTCDateTime()),
    Index(
        "uq_routing_policies_active_model",
        "requested_model",
        unique=True,
        sqlite_where=text("stopped_at IS NULL"),
        postgresql_where=text("stopped_at IS NULL"),
    ),
)

#: Values for columns a row written by an older version lacks (a journal segment
#: from before a migration): what the migration backfilled its rows with.
OLD_ROW_DEFAULTS: Final[dict[str, Any]] = {"usage_reported": 1}
