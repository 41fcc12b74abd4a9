"""Routing policies: a ``provider`` object sent for one model, with sessions held out.

A policy says, for one requested model, which OpenRouter ``provider`` object to
send (``ignore``, ``order``, ``only``, ``sort``, ``allow_fallbacks``,
``preferred_max_latency``…) and what share of sessions to hold out: those are sent
as they were, so the rows of the two arms measure what the policy does. A policy of
kind ``session_key`` tests the sticky key itself: its treatment arm is sent as today
and its holdout arm without the key, so the arms measure what sticky routing saves
(its "provider" object is empty). A session
is assigned to an arm by a stable hash of its sticky key and the policy's id, so a
conversation never changes arm (and stays pinned); a call without a session is
assigned by its call id. Each row records the policy and the arm it was sent under.

Policies live in the ledger's database (``routing_policies``; ``ledger policy``
writes them), so every process applies the same one: :class:`PolicyBook` reads the
active ones in a background thread, at most ``refresh_s`` seconds old, and never on
a caller's thread once started. The pure parts (:func:`arm_for`, :func:`apply_to`)
are what the client, the SDK transport and the gateway share.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, get_args

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from ledger.errors import PolicyError
from ledger.events import Arm
from ledger.schema import routing_policies

log = logging.getLogger(__name__)

#: What a policy changes: the treatment's ``provider`` object, or the holdout's sticky key.
PolicyKind = Literal["provider", "session_key"]
POLICY_KINDS: Final[tuple[PolicyKind, ...]] = get_args(PolicyKind)
#: How old the policies a process applies may be, in seconds, by default.
DEFAULT_REFRESH_S: Final = 10.0
#: The fields of OpenRouter's ``provider`` object a policy may set.
PROVIDER_FIELDS: Final = frozenset(
    {
        "order",
        "only",
        "ignore",
        "sort",
        "allow_fallbacks",
        "require_parameters",
        "data_collection",
        "quantizations",
        "max_price",
        "preferred_min_throughput",
        "preferred_max_latency",
    }
)


@dataclass(frozen=True, slots=True)
class Policy:
    """One active routing policy (a ``routing_policies`` row)."""

    id: int
    requested_model: str
    provider: Mapping[str, Any]
    holdout_share: float
    created_at: dt.datetime
    created_by: str
    reason: str | None = None
    kind: PolicyKind = "provider"


def check_provider(provider: Mapping[str, Any], kind: PolicyKind = "provider") -> None:
    """Raise :class:`PolicyError` unless ``provider`` is what a policy of ``kind`` may send:
    a non-empty provider object, or nothing for a ``session_key`` policy."""
    if kind not in POLICY_KINDS:
        raise PolicyError(f"policy kind {kind!r}: expected one of {list(POLICY_KINDS)}")
    if kind == "session_key":
        if provider:
            raise PolicyError("a session_key policy sends no provider object: leave it empty")
        return
    if not isinstance(provider, Mapping) or not provider:
        raise PolicyError("the provider object must be a non-empty JSON object")
    unknown = sorted(set(provider) - PROVIDER_FIELDS)
    if unknown:
        raise PolicyError(
            f"unknown provider field(s) {unknown}: expected some of {sorted(PROVIDER_FIELDS)}"
        )


def arm_for(policy_id: int, key: str, holdout_share: float) -> Arm:
    """The arm of the session (or call) ``key`` under policy ``policy_id``: stable, and
    uniform over keys, so ``holdout_share`` of sessions are held out."""
    digest = hashlib.blake2b(f"{policy_id}:{key}".encode(), digest_size=8).digest()
    return "holdout" if int.from_bytes(digest, "big") < holdout_share * 2**64 else "treatment"


class KeyHolder(Protocol):
    """Where a provider keeps the sticky key in a request body (a :class:`Provider`)."""

    def withhold_session_key(self, body: dict[str, Any]) -> bool: ...


def apply_to(body: dict[str, Any], policy: Policy, arm: Arm, provider: KeyHolder) -> bool:
    """Change ``body`` as ``policy`` says for ``arm``; whether it changed.

    A ``provider`` policy puts its fields into the treatment's ``provider`` object (the
    policy's fields win, the request's other fields stay). A ``session_key`` policy
    takes the sticky key out of the holdout's request.
    """
    if policy.kind == "session_key":
        return arm == "holdout" and provider.withhold_session_key(body)
    if arm != "treatment":
        return False
    sent = body.get("provider")
    merged = dict(sent) if isinstance(sent, Mapping) else {}
    merged.update(policy.provider)
    body["provider"] = merged
    return True


class PolicySource(Protocol):
    """Where a client finds the policy for a model (a :class:`PolicyBook`)."""

    def policy_for(self, model: str) -> Policy | None: ...


class PolicyBook:
    """The active policies of one ledger database, kept current in a background thread.

    ``policy_for`` reads a snapshot (a dict lookup). The first call waits up to
    ``first_wait_s`` for the first read, then answers from whatever is loaded: a
    database that is slow or down never holds an LLM call for longer (its calls are
    then sent without a policy, and their rows say so). A database without the
    ``routing_policies`` table (before ``ledger db upgrade``) has no policies.
    """

    def __init__(
        self, engine: Engine, *, refresh_s: float = DEFAULT_REFRESH_S, first_wait_s: float = 0.5
    ) -> None:
        self._engine = engine
        self.refresh_s = refresh_s
        self._first_wait_s = first_wait_s
        self._policies: dict[str, Policy] = {}
        self._loaded = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._pid = -1
        self._failed = False

    def policy_for(self, model: str) -> Policy | None:
        if self._pid != os.getpid():  # first use, or a forked child: its own thread
            self._start()
        return self._policies.get(model)

    def _start(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()
            self._loaded.clear()
            threading.Thread(target=self._run, name="ledger-policies", daemon=True).start()
        self._loaded.wait(self._first_wait_s)

    def _run(self) -> None:
        while True:
            self.refresh()
            self._loaded.set()
            if self._stop.wait(self.refresh_s):
                return

    def refresh(self) -> None:
        """Read the active policies now (the background thread does this every ``refresh_s``)."""
        try:
            policies = active_policies(self._engine)
        except SQLAlchemyError as exc:
            if not self._failed:
                log.warning("ledger: cannot read routing policies (%s); keeping the last read", exc)
            self._failed = True
            return
        self._failed = False
        self._policies = {p.requested_model: p for p in policies}

    def close(self) -> None:
        self._stop.set()


def _policy(row: Any) -> Policy:
    return Policy(
        id=row.id,
        requested_model=row.requested_model,
        provider=dict(row.provider),
        holdout_share=row.holdout_share,
        created_at=row.created_at,
        created_by=row.created_by,
        reason=row.reason,
        kind=row.kind,
    )


def active_policies(engine: Engine) -> list[Policy]:
    """Every active policy; none where the table does not exist yet (an old database)."""
    with engine.connect() as conn:
        if not engine.dialect.has_table(conn, routing_policies.name):
            return []
        rows = conn.execute(
            select(routing_policies)
            .where(routing_policies.c.stopped_at.is_(None))
            .order_by(routing_policies.c.requested_model)
        ).all()
    return [_policy(r) for r in rows]


def all_policies(engine: Engine) -> list[Any]:
    """Every policy ever applied, newest first (rows with their stop columns)."""
    with engine.connect() as conn:
        return list(
            conn.execute(select(routing_policies).order_by(routing_policies.c.id.desc())).all()
        )


def start_policy(
    engine: Engine,
    *,
    model: str,
    provider: Mapping[str, Any],
    holdout_share: float,
    by: str,
    reason: str | None,
    now: dt.datetime,
    kind: PolicyKind = "provider",
) -> int:
    """Store a new active policy for ``model``; its id. :class:`PolicyError` when the
    provider object or share is invalid, or ``model`` has an active policy already."""
    check_provider(provider, kind)
    if not 0.0 <= holdout_share < 1.0:
        raise PolicyError(f"holdout share {holdout_share}: expected from 0 up to (not) 1")
    values = {
        "requested_model": model,
        "kind": kind,
        "provider": dict(provider),
        "holdout_share": holdout_share,
        "created_at": now,
        "created_by": by,
        "reason": reason,
    }
    try:
        with engine.begin() as conn:
            result = conn.execute(insert(routing_policies).values(**values))
    except IntegrityError:
        raise PolicyError(
            f"{model} has an active policy already: stop it first (ledger policy stop {model})"
        ) from None
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


def stop_policy(
    engine: Engine, *, model: str, by: str, reason: str | None, now: dt.datetime
) -> Policy:
    """Stop ``model``'s active policy (its calls are sent as before it); the policy stopped."""
    for policy in active_policies(engine):
        if policy.requested_model == model:
            with engine.begin() as conn:
                conn.execute(
                    update(routing_policies)
                    .where(routing_policies.c.id == policy.id)
                    .values(stopped_at=now, stopped_by=by, stop_reason=reason)
                )
            return policy
    raise PolicyError(f"{model} has no active policy (ledger policy list shows them)")


def claim_worse_alert(engine: Engine, policy_id: int, now: dt.datetime) -> bool:
    """Take the right to post that policy ``policy_id`` is worse; False when that was
    posted (or is being posted) already: one alert per policy, however many checkers."""
    with engine.begin() as conn:
        taken = conn.execute(
            update(routing_policies)
            .where(
                routing_policies.c.id == policy_id, routing_policies.c.worse_alerted_at.is_(None)
            )
            .values(worse_alerted_at=now)
        )
    return taken.rowcount == 1


def release_worse_alert(engine: Engine, policy_id: int) -> None:
    """Give a claim back after the alert could not be delivered: the next check retries."""
    with engine.begin() as conn:
        conn.execute(
            update(routing_policies)
            .where(routing_policies.c.id == policy_id)
            .values(worse_alerted_at=None)
        )
