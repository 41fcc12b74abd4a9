"""``ledger demo`` and the workload behind it, on small runs into temporary ledgers."""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from ledger.cli import cli
from ledger.demo import DEMO_EPOCH, next_start, run_demo
from ledger.schema import token_usage
from ledger.simulator.routing import PIN_IDLE_S
from ledger.store.engine import make_engine

#: Columns that must repeat exactly for a seed (ids are fresh UUIDs every run).
COMPARED = (
    "attempt", "started_at", "latency_ms", "ttft_ms", "session_id", "actor_id", "session_key",
    "requested_provider", "requested_model", "provider", "model", "upstream", "generation_id",
    "status", "error_type", "http_status", "input_tokens", "output_tokens", "cache_read_tokens",
    "cache_write_tokens", "cost_usd", "cost_source", "streamed", "paused", "locale", "tags",
)  # fmt: skip


def _rows(url: str) -> list[dict[str, Any]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(token_usage).order_by(token_usage.c.id)).mappings().all()
    finally:
        engine.dispose()
    return [dict(r) for r in rows]


def _comparable(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Rows without their ids; calls numbered in order of appearance instead of by UUID."""
    calls: dict[str, int] = {}
    return [(calls.setdefault(r["call_id"], len(calls)), *(r[c] for c in COMPARED)) for r in rows]


def _migrated(tmp_path: Path, name: str) -> str:
    from ledger.store.migrate import upgrade

    url = f"sqlite:///{tmp_path / name}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    return url


def test_the_same_seed_writes_the_same_ledger(tmp_path: Path) -> None:
    first, second, other = (_migrated(tmp_path, f"{n}.db") for n in ("a", "b", "c"))
    run_demo(first, calls=400, seed=11, strict=True)
    run_demo(second, calls=400, seed=11, strict=True)
    run_demo(other, calls=400, seed=12, strict=True)
    assert _comparable(_rows(first)) == _comparable(_rows(second))
    assert _comparable(_rows(first)) != _comparable(_rows(other))


def test_the_workload_has_what_the_analytics_exist_to_judge(ledger_url: str) -> None:
    stats = run_demo(ledger_url, calls=600, seed=3, strict=True)
    rows = _rows(ledger_url)
    calls = {r["call_id"] for r in rows}
    assert len(calls) == stats.calls == 600
    assert len(rows) == stats.attempts + stats.response_cache_hits > 600
    # every row on the simulator's virtual clock, which starts at the demo epoch; its
    # sessions overlap, and the run outlasts OpenRouter's 10-minute pin window
    start = dt.datetime.fromtimestamp(DEMO_EPOCH, dt.UTC)
    assert min(_utc(r["started_at"]) for r in rows) >= start
    assert max(_utc(r["started_at"]) for r in rows) - start > dt.timedelta(minutes=20)
    # simulated latencies, not the in-process microseconds
    served = [r for r in rows if r["status"] == "ok" and not r["response_cache_hit"]]
    assert min(r["latency_ms"] for r in served) > 50
    # several agents, on OpenRouter with and without the key
    routed = [r for r in rows if r["provider"] == "openrouter"]
    assert {r["actor_id"] for r in routed} >= {"planner", "coder", "reviewer", "researcher"}
    assert any(r["session_key"] for r in routed) and any(not r["session_key"] for r in routed)
    assert len({r["upstream"] for r in routed}) >= 5
    # the rate-limit burst on OpenAI: 429s answered by the Anthropic fallback
    assert any(r["http_status"] == 429 and r["provider"] == "openai" for r in rows)
    fallbacks = [r for r in rows if r["attempt"] == 2 and r["status"] == "ok"]
    assert fallbacks and {r["provider"] for r in fallbacks} == {"anthropic"}
    assert stats.fallbacks == len(fallbacks)
    assert any(r["streamed"] for r in rows) and any(r["paused"] for r in rows)
    # repeated help-widget questions answered by the response cache: one free row each
    hits = [r for r in rows if r["response_cache_hit"]]
    assert hits and len(hits) == stats.response_cache_hits
    assert all(r["attempt"] == 0 and r["cost_usd"] is None for r in hits)
    assert {r["actor_id"] for r in hits} == {"helpdesk"}
    assert all(r["input_tokens"] == 0 and r["status"] == "ok" for r in hits)


def _utc(value: dt.datetime) -> dt.datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def test_a_second_run_starts_after_the_first(sqlite_url: str) -> None:
    assert next_start(sqlite_url) == DEMO_EPOCH
    run_demo(sqlite_url, calls=50, seed=1)
    last = max(_utc(r["started_at"]) for r in _rows(sqlite_url))
    begin = next_start(sqlite_url)
    assert begin > last.timestamp()
    run_demo(sqlite_url, calls=50, seed=1)
    rows = _rows(sqlite_url)
    assert sum(1 for r in rows if _utc(r["started_at"]).timestamp() >= begin) >= 50
    assert len({r["session_id"] for r in rows if _utc(r["started_at"]).timestamp() < begin}) > 0
    second = {r["session_id"] for r in rows if _utc(r["started_at"]).timestamp() >= begin}
    first = {r["session_id"] for r in rows if _utc(r["started_at"]).timestamp() < begin}
    assert not first & second


def test_ledger_demo_migrates_runs_and_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"  # not migrated: the demo does it
    monkeypatch.setenv("LEDGER_DATABASE_URL", url)
    monkeypatch.setenv("LEDGER_ANALYTICS_PATH", str(tmp_path / "analytics.duckdb"))
    result = CliRunner().invoke(
        cli, ["demo", "--calls", "300", "--seed", "4", "--no-dashboard"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    engine = make_engine(url)
    with engine.connect() as conn:
        calls = conn.execute(select(func.count(token_usage.c.call_id.distinct()))).scalar_one()
    engine.dispose()
    assert calls == 300
    out = result.output
    assert "300 calls" in out
    for section in ("Sticky routing per agent", "Fallbacks", "provider.order verdicts"):
        assert section in out  # ledger report's tables
    assert "coder (qwen/qwen3-coder):" in out and "with the key" in out
    assert str(tmp_path / "analytics.duckdb") in out
    assert "ledger dashboard" in out


def test_a_replay_with_ignore_keeps_sessions_pinned_off_the_ignored_upstream(
    tmp_path: Path,
) -> None:
    url = _migrated(tmp_path, "replay.db")
    sonnet = "anthropic/claude-sonnet-4.5"
    run_demo(url, calls=800, seed=5, strict=True, routing={sonnet: {"ignore": ["amazon-bedrock"]}})
    rows = [r for r in _rows(url) if r["requested_model"] == sonnet and r["status"] == "ok"]
    assert rows and all(r["upstream"] != "Amazon Bedrock" for r in rows)
    by_session: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: _utc(r["started_at"])):
        if r["session_key"] is not None:
            by_session.setdefault(r["session_id"], []).append(r)
    # ignore leaves sticky routing on: a keyed session's next turn within the pin
    # window stays where the last one was served (an idle gap releases the pin, and
    # an internal fallback serves one turn elsewhere)
    stays = [
        a["upstream"] == b["upstream"]
        for turns in by_session.values()
        for a, b in itertools.pairwise(turns)
        if (_utc(b["started_at"]) - _utc(a["started_at"])).total_seconds() < PIN_IDLE_S
    ]
    assert len(stays) > 20 and sum(stays) / len(stays) > 0.85


def test_ledger_demo_applies_the_recommendations_and_shows_the_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    monkeypatch.setenv("LEDGER_DATABASE_URL", url)
    monkeypatch.setenv("LEDGER_ANALYTICS_PATH", str(tmp_path / "analytics.duckdb"))
    none = CliRunner().invoke(cli, ["demo", "--apply-recommendations", "--no-dashboard"])
    assert none.exit_code == 2 and "no verdict in this ledger recommends a change" in none.output


def test_sessions_overlap_in_virtual_time_and_each_session_stays_in_order(
    tmp_path: Path,
) -> None:
    """A call in flight in one session delays no other: calls of different sessions
    overlap as real ones do, while a session's own turns follow one another."""
    url = _migrated(tmp_path, "overlap.db")
    run_demo(url, calls=300, seed=8, strict=True)
    spans: dict[str, list[tuple[float, float]]] = {}
    for r in _rows(url):
        if r["latency_ms"] is not None and not r["response_cache_hit"]:
            start = _utc(r["started_at"]).timestamp()
            spans.setdefault(r["session_id"], []).append((start, start + r["latency_ms"] / 1000))
    timeline = sorted((s, e, session) for session, own in spans.items() for s, e in own)
    overlapping = sum(  # by more than a millisecond (latency_ms is rounded)
        1
        for (_, end, a), (start, _, b) in itertools.pairwise(timeline)
        if start < end - 0.001 and a != b
    )
    assert overlapping > 50
    for own in spans.values():
        own.sort()
        assert all(b[0] >= a[1] - 1e-6 for a, b in itertools.pairwise(own))


def test_ledger_demo_as_an_experiment_holds_sessions_out_and_measures_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    monkeypatch.setenv("LEDGER_DATABASE_URL", url)
    monkeypatch.setenv("LEDGER_ANALYTICS_PATH", str(tmp_path / "analytics.duckdb"))
    runner = CliRunner()
    first = runner.invoke(cli, ["demo", "--calls", "2500", "--no-dashboard"])
    assert first.exit_code == 0, first.output
    cut = max(_utc(r["started_at"]) for r in _rows(url))
    second = runner.invoke(
        cli, ["demo", "--calls", "2500", "--no-dashboard", "--as-experiment"],
        env={"COLUMNS": "120"},
    )  # fmt: skip
    assert second.exit_code == 0, second.output
    assert "predicted and measured" in second.output
    assert "treatment" in second.output and "holdout" in second.output
    after = [r for r in _rows(url) if _utc(r["started_at"]) > cut and r["policy_id"] is not None]
    assert after, "no call was sent under a policy"
    arms: dict[tuple[Any, Any], set[str]] = {}
    for r in after:
        arms.setdefault((r["session_id"], r["actor_id"]), set()).add(r["arm"])
    assert all(len(a) == 1 for a in arms.values())  # a session keeps its arm
    held = sum(a == {"holdout"} for a in arms.values()) / len(arms)
    assert 0.04 < held < 0.35  # the 15 % holdout, within sampling error
