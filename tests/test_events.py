"""Validation at the caller: a bad event fails in record(), naming the field and value."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import uuid
from decimal import Decimal
from typing import Any

import pytest

from ledger import events
from ledger.events import UsageEvent, new_id, to_row
from ledger.schema import EVENT_COLUMNS

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


def event(**changes: Any) -> UsageEvent:
    base = UsageEvent(
        started_at=NOW,
        requested_provider="openrouter",
        requested_model="anthropic/claude-sonnet-4.6",
        provider="openrouter",
        status="ok",
        input_tokens=3329,
        cache_read_tokens=3211,
        cache_write_tokens=115,
        output_tokens=53,
    )
    return base.replace(**changes)


def test_wire_row_follows_the_schema_column_order() -> None:
    e = event(
        session_id="s-1",
        actor_id="planner",
        cost_usd=Decimal("0.00219855"),
        cost_source="provider",
        tags={"env": "prod"},
        streamed=True,
        http_status=200,
    )
    row = dict(zip(EVENT_COLUMNS, to_row(e), strict=True))
    assert row["event_id"] == e.event_id
    assert row["session_id"] == "s-1"
    assert row["actor_id"] == "planner"
    assert row["started_at"] == "2026-11-30 12:00:00.000000"
    assert row["cost_usd"] == "0.00219855"
    assert row["tags"] == '{"env":"prod"}'
    assert row["streamed"] == 1 and row["paused"] == 0
    assert row["input_tokens"] == 3329 and row["cache_write_tokens"] == 115


def test_timestamps_in_other_zones_are_stored_as_utc() -> None:
    brt = dt.timezone(dt.timedelta(hours=-3))
    row = to_row(event(started_at=dt.datetime(2026, 11, 30, 9, 0, tzinfo=brt)))
    assert row[EVENT_COLUMNS.index("started_at")] == "2026-11-30 12:00:00.000000"


def test_cache_read_plus_write_may_exceed_input_as_providers_report_it() -> None:
    # The real OpenRouter/Gemini response: 2161 read AND 2161 written of 2168.
    row = dict(
        zip(
            EVENT_COLUMNS,
            to_row(event(input_tokens=2168, cache_read_tokens=2161, cache_write_tokens=2161)),
            strict=True,
        )
    )
    assert (row["input_tokens"], row["cache_read_tokens"], row["cache_write_tokens"]) == (
        2168,
        2161,
        2161,
    )


def test_reasoning_above_output_is_kept_as_reported() -> None:
    row = dict(
        zip(EVENT_COLUMNS, to_row(event(output_tokens=10, reasoning_tokens=11)), strict=True)
    )
    assert (row["output_tokens"], row["reasoning_tokens"]) == (10, 11)


def test_token_counts_beyond_32_bits_are_kept_not_clamped() -> None:
    row = dict(zip(EVENT_COLUMNS, to_row(event(input_tokens=3_000_000_000)), strict=True))
    assert row["input_tokens"] == 3_000_000_000


def test_usage_reported_defaults_true_and_travels_as_0_or_1() -> None:
    assert dict(zip(EVENT_COLUMNS, to_row(event()), strict=True))["usage_reported"] == 1
    row = to_row(event(usage_reported=False))
    assert dict(zip(EVENT_COLUMNS, row, strict=True))["usage_reported"] == 0


def test_abandoned_is_an_error_type() -> None:
    to_row(event(status="error", error_type="abandoned", usage_reported=False))


@pytest.mark.parametrize(
    ("changes", "field", "why"),
    [
        ({"started_at": dt.datetime(2026, 1, 1)}, "started_at", "timezone-aware"),
        (
            {"started_at": dt.datetime.max.replace(tzinfo=dt.timezone(-dt.timedelta(hours=3)))},
            "started_at",
            "out of range once converted to UTC",
        ),
        ({"input_tokens": -1}, "input_tokens", "integer from 0"),
        ({"output_tokens": 1.5}, "output_tokens", "integer from 0"),
        ({"output_tokens": True}, "output_tokens", "integer from 0"),
        ({"input_tokens": 2**63}, "input_tokens", "integer from 0"),
        ({"usage_reported": 1}, "usage_reported", "bool"),
        ({"cache_read_tokens": 4000}, "cache_read_tokens", "exceeds input_tokens (3329)"),
        ({"cache_write_tokens": 4000}, "cache_write_tokens", "exceeds input_tokens (3329)"),
        ({"session_id": "x" * 257}, "session_id", "at most 256"),
        ({"provider": ""}, "provider", "required"),
        ({"requested_model": None}, "requested_model", "required"),
        ({"status": "success"}, "status", "'ok' or 'error'"),
        ({"error_type": "boom"}, "error_type", "expected one of"),
        ({"event_id": "not-a-uuid"}, "event_id", "UUID"),
        ({"call_id": "0" * 36}, "call_id", "UUID"),
        ({"cost_usd": 0.1}, "cost_usd", "never a float"),
        ({"cost_usd": Decimal("NaN")}, "cost_usd", "finite"),
        ({"cost_usd": Decimal("1e12")}, "cost_usd", "finite"),
        ({"cost_source": "provider"}, "cost_source", "cost_usd is None"),
        ({"tags": {"x": object()}}, "tags", "JSON"),
        ({"tags": ["a"]}, "tags", "dict"),
        ({"latency_ms": float("inf")}, "latency_ms", "finite"),
        ({"actor_id": "a\x00b"}, "actor_id", "NUL"),
        ({"actor_id": "\ud800"}, "actor_id", "UTF-8"),
        ({"http_status": 42}, "http_status", "integer from 100"),
        ({"router_attempts": []}, "router_attempts", "expected 1 to 32"),
        ({"router_attempts": [{"upstream": "A", "status": 200}]}, "router_attempts", "expected"),
        (
            {"router_attempts": [{"upstream": "A", "status": 200, "latency_ms": -1.0}]},
            "router_attempts",
            "expected",
        ),
        (
            {"router_attempts": [{"upstream": "A", "status": 600, "latency_ms": None}]},
            "router_attempts",
            "expected",
        ),
        ({"router_attempts": "OpenAI"}, "router_attempts", "expected"),
    ],
)
def test_invalid_events_raise_naming_field_and_value(
    changes: dict[str, Any], field: str, why: str
) -> None:
    with pytest.raises(ValueError, match=rf"UsageEvent\.{field} = .*{re.escape(why)}"):
        to_row(event(**changes))


def test_event_ids_are_generated_when_absent_and_distinct() -> None:
    a, b = event(), event()
    assert a.event_id != b.event_id and len(a.event_id) == 36


def test_new_ids_are_distinct_canonical_uuid4s() -> None:
    ids = [new_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for value in ids:
        parsed = uuid.UUID(value)
        assert str(parsed) == value
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_never_hands_out_the_parents_next_ids() -> None:
    # Ids are made in batches; a child forked between two calls must not reuse the
    # parent's unused ones (duplicate event ids would make the ledger drop rows).
    new_id()  # the parent now holds spare ids
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, ",".join(new_id() for _ in range(100)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = set(pipe.read().split(","))
    os.waitpid(pid, 0)
    parent = {new_id() for _ in range(100)}
    assert len(child) == 100 and not child & parent


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"started_at": dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.timezone(dt.timedelta(hours=-3)))},
        {"latency_ms": 812, "ttft_ms": 0.0},
        {"model": "modèle-é", "upstream": "上游"},
        {"tags": {"env": "prod", "n": 2**80, "ok": True, "none": None}},
        {"usage_details": {"input": {"text": 10, "image": 5}}},
        {"cost_usd": 3, "cost_source": "computed"},
        {"http_status": 429, "status": "error", "error_type": "rate_limited"},
        {"response_cache_hit": True, "streamed": True, "paused": True, "usage_reported": False},
        {
            "router_attempts": [
                {"upstream": "DeepInfra", "status": 502, "latency_ms": None},
                {"upstream": "Together", "status": 200, "latency_ms": 412.5},
            ]
        },
    ],
)
def test_the_usual_path_writes_the_row_the_checked_path_writes(changes: dict[str, Any]) -> None:
    # to_row checks the usual event in C and hands anything else to _checked_row: for
    # any good event both must give the same wire row.
    e = event(**changes)
    assert to_row(e) == events._checked_row(e)


@pytest.mark.parametrize(
    "at",
    [
        dt.datetime(2026, 11, 30, 12, 0, 1, 250_000, tzinfo=dt.UTC),
        dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC),  # no fraction: msgspec drops it
        dt.datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC),
        dt.datetime(999, 3, 4, 5, 6, 7, 8, tzinfo=dt.UTC),  # a three-digit year
        dt.datetime.max.replace(tzinfo=dt.UTC),
    ],
)
def test_a_utc_timestamp_is_stored_as_its_naive_iso_text(at: dt.datetime) -> None:
    row = to_row(event(started_at=at))
    assert row[EVENT_COLUMNS.index("started_at")] == at.replace(tzinfo=None).isoformat(
        " ", "microseconds"
    )


@pytest.mark.parametrize(
    "tags",
    [
        {"env": "prod", "n": 2**80, "m": -(2**70), "ok": False, "none": None},
        {'quote"back\\slash': "tab\tnl\ncr\r\x00\x1f\x7f", "é": "上游 \u2028 😀"},
        {"lone": "\ud800"},  # msgspec refuses a lone surrogate; json keeps it
        {},
    ],
)
def test_tags_are_stored_as_compact_json_text(tags: dict[str, Any]) -> None:
    row = to_row(event(tags=tags, usage_details={"input": dict.fromkeys(tags, 1)}))
    assert row[EVENT_COLUMNS.index("tags")] == json.dumps(
        tags, ensure_ascii=False, separators=(",", ":")
    )
    assert row[EVENT_COLUMNS.index("usage_details")] == json.dumps(
        {"input": dict.fromkeys(tags, 1)}, ensure_ascii=False, separators=(",", ":")
    )


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"model": "a\x00b"}, "model"),
        ({"latency_ms": float("nan")}, "latency_ms"),
        ({"ttft_ms": float("inf")}, "ttft_ms"),
        ({"attempt": True}, "attempt"),
        ({"input_tokens": 5, "cache_read_tokens": 6}, "cache_read_tokens"),
        ({"cost_source": "provider", "cost_usd": None}, "cost_source"),
        ({"event_id": "x" * 36}, "event_id"),
        ({"status": "fine"}, "status"),
        ({"upstream": "u" * 129}, "upstream"),
        ({"requested_model": ""}, "requested_model"),
    ],
)
def test_a_bad_value_the_usual_path_meets_is_named_as_before(
    changes: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValueError, match=f"UsageEvent.{field} ="):
        to_row(event(**changes))


def test_router_attempts_are_stored_as_compact_json_and_a_bad_list_is_dropped() -> None:
    attempts = [
        {"upstream": "DeepInfra", "status": 502, "latency_ms": None},
        {"upstream": "Together", "status": 200, "latency_ms": 412.5},
    ]
    row = to_row(event(router_attempts=attempts))
    assert json.loads(row[EVENT_COLUMNS.index("router_attempts")]) == attempts
    assert EVENT_COLUMNS[-1] == "router_attempts"  # new columns go last (to_row's positions)
    # The attempt happened: a list the column cannot hold is dropped, the row kept.
    kept = events.recordable(event(router_attempts=[{"upstream": 1}]))
    assert kept.router_attempts is None and kept.tags == {events.REPAIRED_TAG: "router_attempts"}
