"""The README's "Frameworks" recipes, run as written against the simulator: pydantic-ai,
LangChain's ChatOpenAI and the OpenAI Agents SDK, each metered through
``ledger.httpx_client``/``ledger.async_httpx_client``. Each test asserts the rows a user
would look at: count, provider, model, upstream, tokens with cache reads, cost, session
and actor, one ``call_id`` across the SDK's retries, streamed and not."""

from __future__ import annotations

import asyncio

import pytest
from openai import AsyncOpenAI

import ledger
from ledger.simulator import Fault, FaultKind, Simulator
from tests.instrument.conftest import Rows

Server = tuple[Simulator, str]
SYSTEM = "You are a careful code-review agent with a long tool contract. " * 80

# The frameworks' own deprecations are not under test (filterwarnings is "error").
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _assert_openai_rows(rows: list[ledger.UsageEvent], session: str, actor: str) -> None:
    for row in rows:
        assert (row.provider, row.requested_model, row.status) == ("openai", "gpt-4o-mini", "ok")
        assert row.model is not None and row.model.startswith("gpt-4o-mini")
        assert row.input_tokens > 0 and row.output_tokens > 0 and row.usage_reported
        assert row.cost_source == "computed" and row.cost_usd is not None and row.cost_usd > 0
        assert (row.session_id, row.actor_id) == (session, actor)
    assert any(r.cache_read_tokens > 0 for r in rows[1:])  # the long system prompt, cached


async def test_pydantic_ai_run_stream_tools_and_concurrent_agents(
    sim_server: Server, rows: Rows
) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    base = sim_server[1] + "/v1"
    # The recipe:
    client = AsyncOpenAI(
        base_url=base,
        api_key="sk-test",
        http_client=ledger.async_httpx_client(ledger=rows, providers={base: "openai"}),
    )
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, system_prompt=SYSTEM)

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file of the change under review."""
        return path

    with ledger.context(session_id="s-pyd", actor_id="reviewer"):
        result = await agent.run("review a")
        async with agent.run_stream("review b") as stream:
            await stream.get_output()
    # Each run is a tool loop (the model calls read_file, then answers): two calls each.
    assert (result.usage.requests, result.usage.tool_calls) == (2, 1)
    assert result.usage.input_tokens == sum(r.input_tokens for r in rows.events[:2])
    assert [r.streamed for r in rows.events] == [False, False, True, True]
    _assert_openai_rows(rows.events, "s-pyd", "reviewer")

    async def one(name: str) -> None:
        with ledger.context(session_id=f"s-{name}", actor_id=name):
            await agent.run(f"review {name}")

    await asyncio.gather(one("planner"), one("critic"))
    assert {(r.session_id, r.actor_id) for r in rows.events[4:]} == {
        ("s-planner", "planner"),
        ("s-critic", "critic"),
    }
    await client.close()


def test_langchain_invoke_stream_batch_and_async(sim_server: Server, rows: Rows) -> None:
    from langchain_core.messages import AIMessage
    from langchain_openai import ChatOpenAI

    base = sim_server[1] + "/v1"
    meter = {"ledger": rows, "providers": {base: "openai"}}
    http, async_http = ledger.httpx_client(**meter), ledger.async_httpx_client(**meter)
    # The recipe: both clients (only one leaves the other path unmetered), and stream_usage.
    llm = ChatOpenAI(
        model="gpt-4o-mini",
        base_url=base,
        api_key="sk-test",  # type: ignore[arg-type]
        http_client=http,
        http_async_client=async_http,
        stream_usage=True,
    )
    prompt = [("system", SYSTEM), ("user", "review")]
    with ledger.context(session_id="s-lc", actor_id="chain"):
        llm.invoke(prompt)
        chunks = list(llm.stream(prompt))
        llm.batch([prompt, prompt])

        async def ainvoke() -> AIMessage:
            async with async_http:  # closed in the loop that opened its connections
                return await llm.ainvoke(prompt)

        reply = asyncio.run(ainvoke())
    http.close()
    assert len(rows.events) == 5
    assert [r.streamed for r in rows.events] == [False, True, False, False, False]
    streamed = rows.events[1]
    total = sum((c.usage_metadata or {}).get("output_tokens", 0) for c in chunks)  # type: ignore[misc]
    assert streamed.output_tokens == total > 0
    assert reply.usage_metadata is not None
    assert rows.events[4].input_tokens == reply.usage_metadata["input_tokens"]
    _assert_openai_rows(rows.events, "s-lc", "chain")


def test_langchain_retries_share_a_call_id(sim_server: Server, rows: Rows) -> None:
    from langchain_openai import ChatOpenAI

    sim, url = sim_server
    base = url + "/v1"
    http = ledger.httpx_client(ledger=rows, providers={base: "openai"})
    llm = ChatOpenAI(
        model="gpt-4o-mini",
        base_url=base,
        api_key="sk-test",  # type: ignore[arg-type]
        http_client=http,
        max_retries=1,
    )
    sim.faults.add(Fault(FaultKind.RATE_LIMIT, "openai", count=1))
    with http:
        llm.invoke([("user", "retry")])
    assert [(r.attempt, r.status, r.http_status) for r in rows.events] == [
        (1, "error", 429),
        (2, "ok", 200),
    ]
    assert len({r.call_id for r in rows.events}) == 1


async def test_agents_sdk_run_streamed_and_concurrent(sim_server: Server, rows: Rows) -> None:
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)  # the tracing exporter would call api.openai.com

    @function_tool
    def read_file(path: str) -> str:
        """Read a file of the change under review."""
        return path

    base = sim_server[1] + "/v1"
    # The recipe: include_usage, since the SDK asks streams for usage only on api.openai.com.
    client = AsyncOpenAI(
        base_url=base,
        api_key="sk-test",
        http_client=ledger.async_httpx_client(ledger=rows, providers={base: "openai"}),
    )
    agent = Agent(
        name="reviewer",
        instructions=SYSTEM,
        model=OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client),
        model_settings=ModelSettings(include_usage=True),
        tools=[read_file],
    )
    with ledger.context(session_id="s-ag", actor_id="reviewer"):
        result = await Runner.run(agent, "review a")
        streamed = Runner.run_streamed(agent, "review b")
        async for _ in streamed.stream_events():
            pass
    # Each run is a tool loop (the model calls read_file, then answers): two calls each.
    usage = result.context_wrapper.usage
    assert usage.requests == 2
    assert usage.input_tokens == sum(r.input_tokens for r in rows.events[:2])
    assert [r.streamed for r in rows.events] == [False, False, True, True]
    assert sum(r.output_tokens for r in rows.events[2:]) == (
        streamed.context_wrapper.usage.output_tokens
    )
    _assert_openai_rows(rows.events, "s-ag", "reviewer")

    async def one(name: str) -> None:
        with ledger.context(session_id=f"s-{name}", actor_id=name):
            await Runner.run(agent, f"review {name}")

    await asyncio.gather(one("planner"), one("critic"))
    assert {(r.session_id, r.actor_id) for r in rows.events[4:]} == {
        ("s-planner", "planner"),
        ("s-critic", "critic"),
    }
    await client.close()


async def test_agents_sdk_on_openrouter_records_the_upstream(
    sim_server: Server, rows: Rows
) -> None:
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    client = AsyncOpenAI(
        base_url=sim_server[1] + "/api/v1",  # OpenRouter, recognised by its path
        api_key="sk-or",
        http_client=ledger.async_httpx_client(ledger=rows),
    )
    agent = Agent(
        name="router",
        instructions=SYSTEM,
        model=OpenAIChatCompletionsModel(model="qwen/qwen3-coder", openai_client=client),
        model_settings=ModelSettings(include_usage=True),
    )
    with ledger.context(session_id="s-or", actor_id="router"):
        await Runner.run(agent, "review")
    (row,) = rows.events
    assert row.provider == "openrouter" and row.requested_model == "qwen/qwen3-coder"
    assert row.upstream is not None and row.cost_source == "provider" and row.cost_usd
    assert (row.session_id, row.actor_id) == ("s-or", "router")
    await client.close()
