"""``POST /v1/responses``: OpenAI's Responses API through the gateway, with the real openai
SDK and the Agents SDK's default model, on loopback in front of the simulator: plain and
streamed (the semantic events), function tools, structured output, across wires to an
Anthropic route, each call recorded as a row whose tokens are the ones the client saw;
what cannot be served is refused with a 400 that says what to change."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pydantic
import pytest

from tests.gateway.conftest import KEY, Rows, Served

LONG = "You are a careful code-review agent with a long tool contract. " * 80
TOOLS: Any = [
    {
        "type": "function",
        "name": "read_file",
        "description": "Read a file of the change.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    }
]


class Verdict(pydantic.BaseModel):
    verdict: str
    score: int


@pytest.fixture
def client(gateway: Served) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(api_key=KEY, base_url=gateway.url + "/v1", max_retries=0) as sdk:
        yield sdk


def test_plain_response_and_its_row_agree(client: openai.OpenAI, rows: Rows) -> None:
    first = client.responses.create(model="gpt-4o-mini", instructions=LONG, input="review a")
    second = client.responses.create(model="gpt-4o-mini", instructions=LONG, input="review a")
    assert first.object == "response" and first.status == "completed"
    assert first.id.startswith("resp_") and first.output_text
    assert first.output[0].type == "message"
    one, two = rows.wait(2)
    assert (one.provider, one.requested_model, one.status) == ("openai", "gpt-4o-mini", "ok")
    assert first.usage is not None and second.usage is not None
    assert (first.usage.input_tokens, first.usage.output_tokens) == (
        one.input_tokens,
        one.output_tokens,
    )
    assert first.usage.total_tokens == first.usage.input_tokens + first.usage.output_tokens
    assert second.usage.input_tokens_details.cached_tokens == two.cache_read_tokens > 0
    assert first.usage.output_tokens_details.reasoning_tokens == 0


def test_streamed_response_sends_the_semantic_events(client: openai.OpenAI, rows: Rows) -> None:
    stream = client.responses.create(model="gpt-4o-mini", input="review b", stream=True)
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds and "response.output_item.done" in kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response  # type: ignore[union-attr]
    assert final.output_text == text
    (row,) = rows.wait(1)
    assert row.streamed and final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (
        row.input_tokens,
        row.output_tokens,
    )


@pytest.mark.parametrize("model", ["gpt-4o-mini", "claude-haiku"])
@pytest.mark.parametrize("streamed", [False, True])
def test_function_tool_loop_on_either_wire(
    client: openai.OpenAI, rows: Rows, model: str, streamed: bool
) -> None:
    ask = "Read 'src/app.py' and review it"
    if streamed:
        with client.responses.stream(model=model, input=ask, tools=TOOLS) as stream:
            first = stream.get_final_response()
    else:
        first = client.responses.create(model=model, input=ask, tools=TOOLS)
    (call,) = first.output
    assert call.type == "function_call" and call.name == "read_file"
    assert json.loads(call.arguments) == {"path": "src/app.py"}
    history: Any = [
        {"role": "user", "content": ask},
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "print(1)"},
    ]
    second = client.responses.create(model=model, input=history, tools=TOOLS)
    assert second.output[0].type == "message" and second.output_text
    rows_seen = rows.wait(2)
    expected = "openai" if model == "gpt-4o-mini" else "anthropic"
    assert [r.provider for r in rows_seen] == [expected, expected]
    assert second.usage is not None and second.usage.input_tokens == rows_seen[1].input_tokens


@pytest.mark.parametrize("model", ["gpt-4o-mini", "claude-haiku"])
def test_structured_output_parses(client: openai.OpenAI, model: str) -> None:
    parsed = client.responses.parse(
        model=model, input="Judge 'clean' code, score 8", text_format=Verdict
    )
    assert parsed.output_parsed == Verdict(verdict="clean", score=8)


def test_capped_output_is_incomplete(client: openai.OpenAI) -> None:
    answer = client.responses.create(model="gpt-4o-mini", input="review", max_output_tokens=16)
    assert answer.status == "incomplete"
    assert answer.incomplete_details is not None
    assert answer.incomplete_details.reason == "max_output_tokens"


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"previous_response_id": "resp_123"}, "send the whole history in 'input'"),
        ({"tools": [{"type": "web_search"}]}, "built-in tool 'web_search'"),
        ({"background": True}, "background"),
        ({"modalities": ["audio"]}, "'modalities' is not a Responses API field"),
    ],
)
def test_what_cannot_be_served_is_a_400_saying_what_to_change(
    client: openai.OpenAI, rows: Rows, extra: dict[str, Any], says: str
) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="gpt-4o-mini", input="hi", extra_body=extra)
    assert says in str(raised.value)
    assert rows.events == []  # nothing was sent upstream


def test_agents_sdk_default_model_runs_a_tool_loop(gateway: Served, rows: Rows) -> None:
    from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled

    set_tracing_disabled(True)  # the tracing exporter would call api.openai.com

    @function_tool
    def read_file(path: str) -> str:
        """Read a file of the change under review."""
        return "print(1)"

    async def run() -> tuple[str, str]:
        client = openai.AsyncOpenAI(api_key=KEY, base_url=gateway.url + "/v1")
        # The default model is the Responses API one (OpenAIResponsesModel).
        set_default_openai_client(client, use_for_tracing=False)
        agent = Agent(name="reviewer", instructions=LONG, model="gpt-4o-mini", tools=[read_file])
        plain = await Runner.run(agent, "Read 'a.py' and review it")
        streamed = Runner.run_streamed(agent, "Read 'b.py' and review it")
        async for _ in streamed.stream_events():
            pass
        await client.close()
        return str(plain.final_output), str(streamed.final_output)

    plain, streamed = asyncio.run(run())
    assert plain and streamed
    seen = rows.wait(4)
    assert [r.streamed for r in seen] == [False, False, True, True]
    assert all(r.provider == "openai" and r.output_tokens > 0 for r in seen)
