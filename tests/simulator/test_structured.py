"""Tool calls and JSON from the simulator, read by the official SDKs over a real socket:
the shapes their parsers (and so every framework on them) expect."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pydantic
import pytest

from ledger.simulator import Simulator, VirtualClock, serve_in_thread
from ledger.simulator.structured import Tool, Wanted, instance, shape

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"],
}
OPENAI_TOOLS: Any = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {
        "type": "function",
        "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
    },
]
ASK = "What is the weather in 'Paris' for the next 3 days?"


class Joke(pydantic.BaseModel):
    setup: str
    punchline: str
    rating: int


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serve_in_thread(Simulator(clock=VirtualClock(), seed=3)) as base:
        yield base


@pytest.fixture
def oai(url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(api_key="sk-test", base_url=url + "/v1", max_retries=0) as client:
        yield client


@pytest.fixture
def claude(url: str) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(api_key="sk-ant-test", base_url=url, max_retries=0) as client:
        yield client


def test_openai_tool_call_has_json_string_arguments_and_finish_reason(oai: openai.OpenAI) -> None:
    answer = oai.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": ASK}], tools=OPENAI_TOOLS
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "days": 3}
    assert answer.usage is not None and answer.usage.completion_tokens >= 1


def test_openai_streamed_tool_call_arrives_as_argument_deltas(oai: openai.OpenAI) -> None:
    stream = oai.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": ASK}],
        tools=OPENAI_TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        stream=True,
    )
    names, fragments, finish = [], [], None
    for chunk in stream:
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or ():
                assert call.index == 0
                if call.function and call.function.name:
                    names.append(call.function.name)
                fragments.append(call.function.arguments if call.function else "")
            finish = choice.finish_reason or finish
    assert names == ["get_time"] and finish == "tool_calls"
    assert json.loads("".join(f or "" for f in fragments)) == {}


def test_after_a_tool_result_auto_answers_with_text(oai: openai.OpenAI) -> None:
    first = oai.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": ASK}], tools=OPENAI_TOOLS
    )
    call = (first.choices[0].message.tool_calls or [])[0]
    history: Any = [
        {"role": "user", "content": ASK},
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    second = oai.chat.completions.create(model="gpt-4o-mini", messages=history, tools=OPENAI_TOOLS)
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content and not second.choices[0].message.tool_calls


def test_openai_structured_output_parses_into_the_schema(oai: openai.OpenAI) -> None:
    parsed = oai.chat.completions.parse(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Tell a joke about 'cats', rated 7"}],
        response_format=Joke,
    )
    joke = parsed.choices[0].message.parsed
    assert joke == Joke(setup="cats", punchline="cats", rating=7)


def test_openai_json_mode_answers_an_object_with_the_quoted_keys(oai: openai.OpenAI) -> None:
    answer = oai.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Reply in JSON with 'setup' and 'punchline' keys"}],
        response_format={"type": "json_object"},
    )
    assert set(json.loads(answer.choices[0].message.content or "")) == {"setup", "punchline"}


def test_anthropic_tool_use_block_and_stop_reason(claude: anthropic.Anthropic) -> None:
    tools: Any = [{"name": "get_weather", "input_schema": WEATHER}]
    answer = claude.messages.create(
        model="claude-haiku-4-5-20251001",
        max_tokens=200,
        messages=[{"role": "user", "content": ASK}],
        tools=tools,
        tool_choice={"type": "any"},
    )
    assert answer.stop_reason == "tool_use"
    (block,) = answer.content
    assert block.type == "tool_use" and block.id.startswith("toolu_")
    assert block.name == "get_weather" and block.input == {"city": "Paris", "days": 3}


def test_anthropic_streamed_tool_use_is_input_json_deltas(claude: anthropic.Anthropic) -> None:
    tools: Any = [{"name": "get_weather", "input_schema": WEATHER}]
    with claude.messages.stream(
        model="claude-haiku-4-5-20251001",
        max_tokens=200,
        messages=[{"role": "user", "content": ASK}],
        tools=tools,
    ) as stream:
        kinds = {event.delta.type for event in stream if event.type == "content_block_delta"}
        final = stream.get_final_message()
    assert kinds == {"input_json_delta"}
    assert final.stop_reason == "tool_use"
    assert final.content[0].type == "tool_use"
    assert final.content[0].input == {"city": "Paris", "days": 3}


def test_anthropic_output_format_answers_json_text(claude: anthropic.Anthropic) -> None:
    answer = claude.messages.create(
        model="claude-haiku-4-5-20251001",
        max_tokens=200,
        messages=[{"role": "user", "content": "a joke rated 9"}],
        extra_body={"output_config": {"format": {"type": "json_schema", "schema": WEATHER}}},
    )
    assert answer.stop_reason == "end_turn"
    assert answer.content[0].type == "text"
    assert json.loads(answer.content[0].text) == {
        "city": "simulated value from the ledger simulator",
        "days": 9,
    }


def test_tool_choice_none_answers_text() -> None:
    wanted = Wanted(tools=(Tool("t", WEATHER),), tool_choice="none", user_text=ASK)
    assert shape(wanted) is None


def test_instance_follows_refs_enums_and_optional_types() -> None:
    schema = {
        "$defs": {"Kind": {"enum": ["a", "b"]}},
        "type": "object",
        "properties": {
            "kind": {"$ref": "#/$defs/Kind"},
            "note": {"anyOf": [{"type": "null"}, {"type": "string"}]},
            "tags": {"type": "array", "items": {"type": "number"}},
        },
    }
    assert instance(schema, 'tag it 2.5 as "x"') == {"kind": "a", "note": "x", "tags": [2.5]}
