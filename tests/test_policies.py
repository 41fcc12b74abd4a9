"""Routing policies: stable, balanced arms; applied to one model's OpenRouter calls only;
read from the ledger's database by every process within its bound."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import openai
import pytest
from sqlalchemy import select

import ledger as ledger_pkg
from ledger.client import Client
from ledger.errors import PolicyError
from ledger.policies import PolicyBook, arm_for, start_policy, stop_policy
from ledger.providers import make_provider
from ledger.schema import token_usage
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger
from tests.llm_loopback import LoopbackLLM, Reply

NOW = dt.datetime(2026, 12, 5, 9, 0, tzinfo=dt.UTC)
MODEL, OTHER = "anthropic/claude-sonnet-4.6", "qwen/qwen3-coder"
IGNORE = {"ignore": ["amazon-bedrock"]}
USER = [{"role": "user", "content": "Hi"}]


def test_an_arm_is_stable_per_session_and_the_holdout_share_holds_over_10000() -> None:
    keys = [f"app:s-{i}:planner" for i in range(10_000)]
    arms = [arm_for(7, k, 0.15) for k in keys]
    assert arms == [arm_for(7, k, 0.15) for k in keys]
    share = arms.count("holdout") / len(arms)
    assert abs(share - 0.15) < 4 * (0.15 * 0.85 / 10_000) ** 0.5  # within sampling error
    # another policy draws its own arms: a session is not always held out
    other = [arm_for(8, k, 0.15) for k in keys]
    both = sum(a == b == "holdout" for a, b in zip(arms, other, strict=True)) / len(keys)
    assert abs(both - 0.15**2) < 0.01


def test_a_second_active_policy_for_one_model_is_refused(ledger_url: str) -> None:
    engine = make_engine(ledger_url)
    try:
        start_policy(
            engine, model=MODEL, provider=IGNORE, holdout_share=0.1, by="t", reason=None, now=NOW
        )
        with pytest.raises(PolicyError, match="active policy already"):
            start_policy(
                engine, model=MODEL, provider={"sort": "price"}, holdout_share=0.1, by="t",
                reason=None, now=NOW,
            )  # fmt: skip
        with pytest.raises(PolicyError, match="unknown provider field"):
            start_policy(
                engine, model=OTHER, provider={"oder": ["x"]}, holdout_share=0.1, by="t",
                reason=None, now=NOW,
            )  # fmt: skip
        stop_policy(engine, model=MODEL, by="t", reason="done", now=NOW)
        start_policy(
            engine, model=MODEL, provider=IGNORE, holdout_share=0.2, by="t", reason=None, now=NOW
        )  # stopped, the model takes a new one
    finally:
        engine.dispose()


def test_a_policy_changed_by_another_process_applies_within_the_bound(ledger_url: str) -> None:
    reader, writer = make_engine(ledger_url), make_engine(ledger_url)
    book = PolicyBook(reader, refresh_s=0.2)
    try:
        assert book.policy_for(MODEL) is None
        start_policy(
            writer, model=MODEL, provider=IGNORE, holdout_share=0.1, by="t", reason=None, now=NOW
        )
        started = time.monotonic()
        while book.policy_for(MODEL) is None:
            assert time.monotonic() - started < 0.2 + 2.0, "not applied within the bound"
            time.sleep(0.02)
        found = book.policy_for(MODEL)
        assert found is not None and dict(found.provider) == IGNORE
        assert book.policy_for(OTHER) is None
        stop_policy(writer, model=MODEL, by="t", reason=None, now=NOW)
        started = time.monotonic()
        while book.policy_for(MODEL) is not None:
            assert time.monotonic() - started < 0.2 + 2.0, "not stopped within the bound"
            time.sleep(0.02)
    finally:
        book.close()
        reader.dispose()
        writer.dispose()


def _client(server: LoopbackLLM, ledger: Ledger, **kw: object) -> Client:
    provider = make_provider("openrouter", api_key="sk-or-test", base_url=server.url)
    return Client(providers=[provider], ledger=ledger, default_provider="openrouter", **kw)  # type: ignore[arg-type]


def test_the_client_applies_a_policy_to_its_model_only_and_records_the_arm(
    server: LoopbackLLM, ledger_url: str, tmp_path: Path
) -> None:
    engine = make_engine(ledger_url)
    policy_id = start_policy(
        engine, model=MODEL, provider=IGNORE, holdout_share=0.5, by="t", reason=None, now=NOW
    )
    sessions = [f"s-{i}" for i in range(12)]
    reply = "openrouter_chat_anthropic_cache_read_write.json"
    server.queue(*(Reply.payload(reply) for _ in range(2 * len(sessions) + 2)))
    with (
        Ledger(ledger_url, journal_dir=tmp_path / "j") as ledger,
        _client(server, ledger) as client,
    ):
        for _turn in range(2):
            for s in sessions:
                client.chat(
                    USER, model=MODEL, session_id=s, actor_id="planner", routing_sort="price"
                )
        client.chat(USER, model=OTHER, session_id="s-0", actor_id="planner", routing_sort="price")
        assert ledger.flush()
    with engine.connect() as conn:
        rows = conn.execute(select(token_usage).order_by(token_usage.c.id)).mappings().all()
    engine.dispose()
    sent = server.requests
    arms: dict[str, set[str]] = {}
    for row, request in zip(rows, sent, strict=True):
        if row["requested_model"] == OTHER:  # another model: untouched, no arm
            assert (row["policy_id"], row["arm"]) == (None, None)
            assert request.body["provider"] == {"sort": "price"}
            continue
        assert row["policy_id"] == policy_id
        arms.setdefault(row["session_id"], set()).add(row["arm"])
        if row["arm"] == "treatment":  # the policy's fields join the request's own
            assert request.body["provider"] == {"sort": "price", **IGNORE}
        else:
            assert request.body["provider"] == {"sort": "price"}
    assert all(len(a) == 1 for a in arms.values())  # a session never changes arm
    assert {a for (a,) in arms.values()} == {"treatment", "holdout"}


def test_without_a_policy_requests_are_byte_identical(
    server: LoopbackLLM, sqlite_url: str, tmp_path: Path
) -> None:
    reply = "openrouter_chat_anthropic_cache_read_write.json"
    server.queue(Reply.payload(reply), Reply.payload(reply))
    with Ledger(sqlite_url, journal_dir=tmp_path / "j") as ledger:
        for policies in (True, False):
            with _client(server, ledger, policies=policies) as client:
                client.chat(USER, model=MODEL, session_id="s", actor_id="a")
    with_book, without = (r.raw for r in server.requests[-2:])
    assert with_book == without and json.loads(with_book)["model"] == MODEL


def test_the_sdk_transport_applies_the_policy_as_the_client_does(
    server: LoopbackLLM, sqlite_url: str, tmp_path: Path
) -> None:
    engine = make_engine(sqlite_url)
    policy_id = start_policy(
        engine, model=MODEL, provider=IGNORE, holdout_share=0.5, by="t", reason=None, now=NOW
    )
    reply = "openrouter_chat_anthropic_cache_read_write.json"
    sessions = [f"s-{i}" for i in range(10)]
    server.queue(*(Reply.payload(reply) for _ in sessions))
    with Ledger(sqlite_url, journal_dir=tmp_path / "j") as led:
        http = ledger_pkg.httpx_client(ledger=led, strict=True)
        base = server.url + "/api/v1"
        with openai.OpenAI(api_key="sk-or-x", base_url=base, http_client=http) as sdk:
            for s in sessions:
                with ledger_pkg.context(session_id=s, actor_id="planner"):
                    sdk.chat.completions.create(model=MODEL, messages=USER)
        assert led.flush()
    with engine.connect() as conn:
        rows = conn.execute(select(token_usage).order_by(token_usage.c.id)).mappings().all()
    engine.dispose()
    for row, request in zip(rows, server.requests, strict=True):
        assert row["policy_id"] == policy_id
        assert ("provider" in request.body) == (row["arm"] == "treatment")
    assert {r["arm"] for r in rows} == {"treatment", "holdout"}


def test_a_session_key_policy_sends_the_key_to_the_treatment_only_from_client_and_sdk(
    server: LoopbackLLM, ledger_url: str, tmp_path: Path
) -> None:
    """Testing sticky routing itself: the holdout's requests carry no ``session_id``, their
    rows record no key, and a session keeps its arm (drawn from the unsent key)."""
    engine = make_engine(ledger_url)
    policy_id = start_policy(
        engine, model=MODEL, provider={}, holdout_share=0.5, by="t", reason=None, now=NOW,
        kind="session_key",
    )  # fmt: skip
    sessions = [f"s-{i}" for i in range(12)]
    reply = "openrouter_chat_anthropic_cache_read_write.json"
    server.queue(*(Reply.payload(reply) for _ in range(3 * len(sessions))))
    with Ledger(ledger_url, journal_dir=tmp_path / "j") as led:
        with _client(server, led) as client:
            for _turn in range(2):
                for s in sessions:
                    client.chat(USER, model=MODEL, session_id=s, actor_id="planner")
        http = ledger_pkg.httpx_client(ledger=led, strict=True)
        base = server.url + "/api/v1"
        with openai.OpenAI(api_key="sk-or-x", base_url=base, http_client=http) as sdk:
            for s in sessions:
                with ledger_pkg.context(session_id=s, actor_id="planner"):
                    sdk.chat.completions.create(model=MODEL, messages=USER)
        assert led.flush()
    with engine.connect() as conn:
        rows = conn.execute(select(token_usage).order_by(token_usage.c.id)).mappings().all()
    engine.dispose()
    arms: dict[str, set[str]] = {}
    for row, request in zip(rows, server.requests, strict=True):
        assert row["policy_id"] == policy_id
        arms.setdefault(row["session_id"], set()).add(row["arm"])
        treated = row["arm"] == "treatment"
        assert ("session_id" in request.body) == treated
        assert (row["session_key"] is not None) == treated  # the key actually sent
        assert "provider" not in request.body  # nothing else changes
    assert all(len(a) == 1 for a in arms.values())  # client and SDK draw the same arm
    assert {a for (a,) in arms.values()} == {"treatment", "holdout"}


def test_a_session_key_policy_takes_no_provider_object() -> None:
    from ledger.policies import check_provider

    with pytest.raises(PolicyError, match="sends no provider object"):
        check_provider({"sort": "price"}, "session_key")
    with pytest.raises(PolicyError, match="policy kind"):
        check_provider({}, "nope")  # type: ignore[arg-type]
    check_provider({}, "session_key")
