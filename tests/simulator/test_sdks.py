"""The official openai and anthropic SDKs, pointed at the simulator's real HTTP server,
complete plain and streamed calls and see the right usage: proof the wire format is right.

Both SDKs are built on ``httpx2`` (not ``httpx``), so these calls go through a
separate HTTP stack over a real loopback socket.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import anthropic
import openai
import pytest

from ledger.simulator import Fault, FaultKind, Simulator, VirtualClock, serve_in_thread

SYSTEM = "You are a careful code-review agent with a long tool contract. " * 80


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[Simulator, str]]:
    sim = Simulator(clock=VirtualClock(), seed=9)
    with serve_in_thread(sim) as url:
        yield sim, url


@pytest.fixture
def oai(server: tuple[Simulator, str]) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(api_key="sk-test", base_url=server[1] + "/v1", max_retries=0) as client:
        yield client


@pytest.fixture
def openrouter(server: tuple[Simulator, str]) -> Iterator[openai.OpenAI]:
    base = server[1] + "/api/v1"
    with openai.OpenAI(api_key="sk-or-test", base_url=base, max_retries=0) as client:
        yield client


@pytest.fixture
def claude(server: tuple[Simulator, str]) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(api_key="sk-ant-test", base_url=server[1], max_retries=0) as client:
        yield client


def _messages(task: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]


def test_openai_sdk_plain_call_sees_usage_and_cached_tokens(oai: openai.OpenAI) -> None:
    first = oai.chat.completions.create(model="gpt-4o-mini", messages=_messages("review a"))  # type: ignore[arg-type]
    second = oai.chat.completions.create(model="gpt-4o-mini", messages=_messages("review a"))  # type: ignore[arg-type]
    assert first.id.startswith("chatcmpl-") and first.choices[0].message.content
    assert first.model == "gpt-4o-mini-2024-07-18"
    assert first.usage is not None and second.usage is not None
    assert first.usage.prompt_tokens > 1024
    assert first.usage.total_tokens == first.usage.prompt_tokens + first.usage.completion_tokens
    assert second.usage.prompt_tokens_details is not None
    assert second.usage.prompt_tokens_details.cached_tokens == second.usage.prompt_tokens


def test_openai_sdk_stream_with_include_usage(oai: openai.OpenAI) -> None:
    stream = oai.chat.completions.create(
        model="gpt-4o-mini",
        messages=_messages("stream please"),  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage = [], None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
        usage = chunk.usage or usage
    assert "".join(text)
    assert usage is not None and usage.completion_tokens > 0 and usage.prompt_tokens > 0


def test_openai_sdk_sees_rate_limit_with_retry_after(
    server: tuple[Simulator, str], oai: openai.OpenAI
) -> None:
    server[0].faults.add(Fault(FaultKind.RATE_LIMIT, "openai", count=1, retry_after_s=3))
    with pytest.raises(openai.RateLimitError) as caught:
        oai.chat.completions.create(model="gpt-4o-mini", messages=_messages("x"))  # type: ignore[arg-type]
    assert caught.value.response.headers["retry-after"] == "3"


def test_openai_sdk_raises_on_a_midstream_error(
    server: tuple[Simulator, str], oai: openai.OpenAI
) -> None:
    server[0].faults.add(Fault(FaultKind.MIDSTREAM_ERROR, "openai", after_chunks=1))
    stream = oai.chat.completions.create(
        model="gpt-4o-mini",
        messages=_messages("x"),
        stream=True,  # type: ignore[arg-type]
    )
    with pytest.raises(openai.APIError):
        for _ in stream:
            pass


def test_openrouter_through_openai_sdk_reports_upstream_and_cost(openrouter: openai.OpenAI) -> None:
    kwargs = {"extra_body": {"session_id": "app:sess-1:reviewer"}}
    plain = openrouter.chat.completions.create(
        model="qwen/qwen3-coder",
        messages=_messages("route me"),
        **kwargs,  # type: ignore[arg-type]
    )
    extra = plain.model_extra or {}
    assert plain.id.startswith("gen-")
    assert extra["provider"]
    usage_extra = plain.usage.model_extra if plain.usage is not None else None
    assert usage_extra is not None and Decimal(str(usage_extra["cost"])) > 0
    stream = openrouter.chat.completions.create(
        model="qwen/qwen3-coder",
        messages=_messages("route me"),  # type: ignore[arg-type]
        stream=True,
        **kwargs,  # type: ignore[arg-type]
    )
    chunks = list(stream)
    providers = {(c.model_extra or {}).get("provider") for c in chunks}
    assert providers == {extra["provider"]}  # the session key pinned the same upstream
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens > 0
    assert chunks[-1].choices == []


def test_anthropic_sdk_plain_call_reports_cache_write_then_read(
    claude: anthropic.Anthropic,
) -> None:
    system = [{"type": "text", "text": SYSTEM * 5, "cache_control": {"type": "ephemeral"}}]
    calls = [
        claude.messages.create(
            model="claude-haiku-4-5-20251001",
            max_tokens=200,
            system=system,  # type: ignore[arg-type]
            messages=[{"role": "user", "content": "review"}],
        )
        for _ in range(2)
    ]
    first, second = (c.usage for c in calls)
    assert calls[0].id.startswith("msg_") and calls[0].content[0].type == "text"
    assert first.cache_creation_input_tokens and not first.cache_read_input_tokens
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert second.input_tokens < 20  # Anthropic's input_tokens excludes cache reads


def test_anthropic_sdk_stream_final_message_usage(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model="claude-haiku-4-5-20251001",
        max_tokens=64,
        messages=[{"role": "user", "content": "stream it"}],
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.content[0].type == "text" and final.content[0].text == text
    assert final.usage.output_tokens > 0 and final.usage.input_tokens > 0
    assert final.stop_reason in ("end_turn", "max_tokens")


def test_anthropic_sdk_sees_overloaded_529(
    server: tuple[Simulator, str], claude: anthropic.Anthropic
) -> None:
    server[0].faults.add(Fault(FaultKind.OVERLOADED, "anthropic", count=1))
    with pytest.raises(anthropic.APIStatusError) as caught:
        claude.messages.create(
            model="claude-haiku-4-5-20251001",
            max_tokens=10,
            messages=[{"role": "user", "content": "x"}],
        )
    assert caught.value.status_code == 529
    assert "overloaded_error" in caught.value.response.text


def test_anthropic_sdk_stream_error_event_raises(
    server: tuple[Simulator, str], claude: anthropic.Anthropic
) -> None:
    server[0].faults.add(Fault(FaultKind.MIDSTREAM_ERROR, "anthropic", after_chunks=1))
    with (
        pytest.raises(anthropic.APIStatusError),
        claude.messages.stream(
            model="claude-haiku-4-5-20251001",
            max_tokens=64,
            messages=[{"role": "user", "content": "x"}],
        ) as stream,
    ):
        for _ in stream.text_stream:
            pass


def test_sdk_sees_a_dropped_connection_as_a_connection_error(
    server: tuple[Simulator, str], oai: openai.OpenAI
) -> None:
    server[0].faults.add(Fault(FaultKind.CONNECTION_RESET, "openai", count=1))
    with pytest.raises(openai.APIConnectionError):
        oai.chat.completions.create(model="gpt-4o-mini", messages=_messages("x"))  # type: ignore[arg-type]
