"""The LiteLLM callback against the simulator's real HTTP server: one row per LiteLLM
attempt, for each provider family (OpenAI, Anthropic, OpenRouter), from LiteLLM's own
standard logging payload."""

from __future__ import annotations

import asyncio
import inspect
import time
import warnings
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import litellm
import pytest

import ledger
from ledger.instrument.litellm_logger import LedgerLogger
from ledger.simulator import Fault, FaultKind, Simulator
from ledger.simulator.server import free_port
from tests.instrument.conftest import Rows
from tests.llm_loopback import LoopbackLLM, Reply

# LiteLLM touches pydantic APIs pydantic deprecates (model_computed_fields on instances);
# as errors they would break LiteLLM's own stream handling, which is not under test.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

Server = tuple[Simulator, str]
SYSTEM = "You are a careful code-review agent with a long tool contract. " * 80
HAIKU = "claude-haiku-4-5-20251001"


def _messages(task: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]


@pytest.fixture
def logged(rows: Rows) -> Iterator[Rows]:
    logger = LedgerLogger(ledger=rows)
    litellm.callbacks = [logger]
    try:
        yield rows
    finally:
        # LiteLLM copies callbacks into its per-event lists and keeps one instance per
        # class there: remove this one everywhere, or the next test's is never added.
        litellm.logging_callback_manager.remove_callback_from_all_lists(logger)


@pytest.fixture(autouse=True)
def _close_litellms_loop(request: pytest.FixtureRequest) -> Iterator[None]:
    """LiteLLM's sync path calls ``asyncio.get_event_loop()`` on the caller's thread, which
    makes a loop and leaves it open; when an async test later sets its own, the orphan is
    collected unclosed and its sockets warn (an error here). Close it where the test ends."""
    yield
    if inspect.iscoroutinefunction(request.function):
        return  # the loop is pytest-asyncio's, closed by it
    policy = asyncio.get_event_loop_policy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = policy.get_event_loop()
        except RuntimeError:
            return  # none was made (an earlier test's teardown cleared it)
    loop.close()
    policy.set_event_loop(None)


def wait_for(rows: Rows, n: int) -> list[ledger.UsageEvent]:
    """The rows in the order their calls started. LiteLLM logs from a pool of worker
    threads after the call returns, so rows arrive in any order: poll, generously."""
    deadline = time.monotonic() + 60
    while len(rows.events) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(rows.events) == n, rows.events
    return sorted(rows.events, key=lambda row: row.started_at)


def test_openai_plain_and_streamed(sim_server: Server, logged: Rows) -> None:
    base = sim_server[1] + "/v1"
    with ledger.context(session_id="s-1", actor_id="coder"):
        litellm.completion(
            model="openai/gpt-4o-mini", api_base=base, api_key="sk", messages=_messages("a")
        )
        second = litellm.completion(
            model="openai/gpt-4o-mini", api_base=base, api_key="sk", messages=_messages("a")
        )
        stream = litellm.completion(
            model="openai/gpt-4o-mini",
            api_base=base,
            api_key="sk",
            messages=_messages("b"),
            stream=True,
            stream_options={"include_usage": True},
        )
        for _ in stream:
            pass
    first, plain, streamed = wait_for(logged, 3)
    assert (plain.provider, plain.requested_model, plain.model) == (
        "openai",
        "gpt-4o-mini",
        second.model,
    )
    assert plain.input_tokens == second.usage.prompt_tokens  # type: ignore[attr-defined]
    assert plain.cache_read_tokens == second.usage.prompt_tokens_details.cached_tokens > 0  # type: ignore[attr-defined]
    assert plain.cost_source == "computed" and plain.cost_usd is not None and plain.cost_usd > 0
    assert plain.generation_id == second.id and not plain.streamed
    assert streamed.streamed and streamed.output_tokens > 0 and streamed.ttft_ms is not None
    # The stream's row is written from LiteLLM's worker thread: the context still arrives.
    assert {(r.session_id, r.actor_id) for r in (first, plain, streamed)} == {("s-1", "coder")}
    assert len({r.call_id for r in (first, plain, streamed)}) == 3
    assert all(r.status == "ok" and r.usage_reported for r in (first, plain, streamed))


def test_anthropic_cache_reads_and_writes(sim_server: Server, logged: Rows) -> None:
    system = [{"type": "text", "text": SYSTEM * 5, "cache_control": {"type": "ephemeral"}}]
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "review"}]
    for _ in range(2):
        litellm.completion(
            model=f"anthropic/{HAIKU}",
            api_base=sim_server[1],
            api_key="sk-ant",
            max_tokens=40,
            messages=messages,
        )
    write, read = wait_for(logged, 2)
    assert write.provider == read.provider == "anthropic" and read.model == HAIKU
    assert write.cache_write_tokens > 0 and write.cache_read_tokens == 0
    assert read.cache_read_tokens == write.cache_write_tokens
    assert read.input_tokens >= read.cache_read_tokens  # the total, cache included
    assert read.cost_source == "computed" and read.cost_usd is not None
    assert read.cost_usd < write.cost_usd  # type: ignore[operator]


def test_openrouter_upstream_provider_cost_and_sent_key(sim_server: Server, logged: Rows) -> None:
    reply = litellm.completion(
        model="openrouter/openai/gpt-4o-mini",
        api_base=sim_server[1] + "/api/v1",
        api_key="sk-or",
        messages=_messages("route"),
        extra_body={"session_id": "app:s-7:router"},
    )
    (row,) = wait_for(logged, 1)
    assert row.provider == "openrouter" and row.requested_model == "openai/gpt-4o-mini"
    assert row.upstream is not None and row.upstream in {"OpenAI", "Azure"}
    assert row.cost_source == "provider"
    assert row.cost_usd == Decimal(str(reply._hidden_params["response_cost"]))  # type: ignore[attr-defined]
    assert row.session_key == "app:s-7:router"
    assert row.input_tokens == reply.usage.prompt_tokens  # type: ignore[attr-defined]


def test_a_failed_call_is_an_error_row_and_a_retried_one_is_its_success(
    sim_server: Server, logged: Rows
) -> None:
    sim, url = sim_server
    sim.faults.add(Fault(FaultKind.RATE_LIMIT, "openai", count=2))
    with ledger.context(session_id="s-r"):
        with pytest.raises(litellm.RateLimitError):
            litellm.completion(
                model="openai/gpt-4o-mini",
                api_base=url + "/v1",
                api_key="sk",
                messages=_messages("fails"),
                max_retries=0,
            )
        # LiteLLM's own retry (num_retries) reports only the attempt that answered.
        litellm.completion(
            model="openai/gpt-4o-mini",
            api_base=url + "/v1",
            api_key="sk",
            messages=_messages("retried"),
            num_retries=1,
            max_retries=0,
        )
    failed, answered = wait_for(logged, 2)
    assert (failed.status, failed.error_type, failed.http_status) == ("error", "rate_limited", 429)
    assert failed.cost_usd is None and not failed.usage_reported and failed.session_id == "s-r"
    assert (answered.status, answered.attempt, answered.session_id) == ("ok", 1, "s-r")
    assert failed.call_id != answered.call_id


def test_streamed_failure_row_says_streamed(sim_server: Server, logged: Rows) -> None:
    sim, url = sim_server
    sim.faults.add(Fault(FaultKind.RATE_LIMIT, "openai", count=1))
    with pytest.raises(litellm.RateLimitError):
        litellm.completion(
            model="openai/gpt-4o-mini",
            api_base=url + "/v1",
            api_key="sk",
            messages=_messages("s"),
            stream=True,
            max_retries=0,
        )
    (row,) = wait_for(logged, 1)
    assert (row.status, row.error_type, row.streamed) == ("error", "rate_limited", True)


async def test_async_calls_keep_their_task_context(sim_server: Server, logged: Rows) -> None:
    base = sim_server[1] + "/v1"

    async def agent(name: str) -> None:
        with ledger.context(session_id=f"s-{name}", actor_id=name):
            await litellm.acompletion(
                model="openai/gpt-4o-mini", api_base=base, api_key="sk", messages=_messages(name)
            )

    await asyncio.gather(*(agent(n) for n in ("planner", "critic")))
    deadline = time.monotonic() + 60
    while len(logged.events) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert {(r.session_id, r.actor_id) for r in logged.events} == {
        ("s-planner", "planner"),
        ("s-critic", "critic"),
    }


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_openrouter_calls_carry_the_ledger_s_sticky_key_on_the_wire(
    loopback: LoopbackLLM, logged: Rows, stream: bool
) -> None:
    payload = "openrouter_stream_openai_o3.sse" if stream else "openrouter_chat_doc_example.json"
    loopback.queue(Reply.payload(payload))
    with ledger.context(session_id="s-42", actor_id="planner"):
        reply = litellm.completion(
            model="openrouter/openai/gpt-4o-mini",
            api_base=loopback.url + "/api/v1",
            api_key="sk-or",
            messages=_messages("plan"),
            stream=stream,
            max_retries=0,
        )
        if stream:
            for _ in reply:  # type: ignore[union-attr]
                pass
    (sent,) = loopback.requests
    assert sent.body["session_id"] == "ledger:s-42:planner"  # ADR 0221: on the wire
    (row,) = wait_for(logged, 1)
    assert row.session_key == "ledger:s-42:planner"  # the key actually sent
    assert (row.session_id, row.actor_id, row.streamed) == ("s-42", "planner", stream)


async def test_async_openrouter_calls_carry_their_own_task_s_key(
    loopback: LoopbackLLM, logged: Rows
) -> None:
    loopback.default = Reply.payload("openrouter_chat_doc_example.json")

    async def agent(name: str) -> None:
        with ledger.context(session_id="s-1", actor_id=name):
            await litellm.acompletion(
                model="openrouter/openai/gpt-4o-mini",
                api_base=loopback.url + "/api/v1",
                api_key="sk-or",
                messages=_messages(name),
            )

    await asyncio.gather(*(agent(n) for n in ("planner", "critic")))
    assert {r.body["session_id"] for r in loopback.requests} == {
        "ledger:s-1:planner",
        "ledger:s-1:critic",
    }
    deadline = time.monotonic() + 60
    while len(logged.events) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert {(r.actor_id, r.session_key) for r in logged.events} == {
        ("planner", "ledger:s-1:planner"),
        ("critic", "ledger:s-1:critic"),
    }


def test_no_session_no_key_and_other_providers_get_none(
    loopback: LoopbackLLM, logged: Rows
) -> None:
    loopback.default = Reply.payload("openrouter_chat_doc_example.json")
    base = loopback.url + "/api/v1"
    litellm.completion(
        model="openrouter/openai/gpt-4o-mini", api_base=base, api_key="k", messages=_messages("a")
    )
    with ledger.context(session_id="s-2"):  # OpenAI has no sticky sessions
        litellm.completion(
            model="openai/gpt-4o-mini", api_base=base, api_key="k", messages=_messages("b")
        )
    assert ["session_id" in r.body for r in loopback.requests] == [False, False]
    assert [r.session_key for r in wait_for(logged, 2)] == [None, None]


def test_the_simulator_pins_a_litellm_session_to_one_upstream(
    sim_server: Server, logged: Rows
) -> None:
    base = sim_server[1] + "/api/v1"
    with ledger.context(session_id="s-pin", actor_id="coder"):
        for task in range(6):
            litellm.completion(
                model="openrouter/qwen/qwen3-coder",
                api_base=base,
                api_key="sk-or",
                messages=_messages(f"task {task}"),
            )
    rows = wait_for(logged, 6)
    assert {r.session_key for r in rows} == {"ledger:s-pin:coder"}
    assert len({r.upstream for r in rows}) == 1, [r.upstream for r in rows]


@pytest.mark.parametrize(
    "base",
    ["http://127.0.0.1:{dead}/api/v1", "http://no-such-host.invalid/api/v1"],
    ids=["connection-refused", "dns-failure"],
)
def test_a_call_that_reached_no_server_is_a_transport_error_without_a_status(
    logged: Rows, base: str
) -> None:
    with pytest.raises(litellm.APIConnectionError):
        litellm.completion(
            model="openrouter/openai/gpt-4o-mini",
            api_base=base.format(dead=free_port()),
            api_key="sk-or",
            messages=_messages("x"),
            max_retries=0,
        )
    (row,) = wait_for(logged, 1)
    assert (row.status, row.error_type, row.http_status) == ("error", "transport", None)


def test_litellm_reads_the_variable_the_readme_exports(
    loopback: LoopbackLLM, logged: Rows, monkeypatch: pytest.MonkeyPatch
) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "export OPENROUTER_API_BASE=$OPENROUTER_BASE_URL" in readme
    loopback.queue(Reply.payload("openrouter_chat_doc_example.json"))
    monkeypatch.delenv("OPENROUTER_BASE_URL", raising=False)
    monkeypatch.setenv("OPENROUTER_API_BASE", loopback.url + "/api/v1")
    litellm.completion(
        model="openrouter/openai/gpt-4o-mini", api_key="sk-or", messages=_messages("env")
    )
    assert [r.path for r in loopback.requests] == ["/api/v1/chat/completions"]
    assert wait_for(logged, 1)[0].status == "ok"
