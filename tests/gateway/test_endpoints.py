"""The endpoints SDKs and frameworks call besides the two chat routes: Anthropic's
``/v1/messages/count_tokens`` (forwarded to Anthropic, or a 400 naming what to use) and
``/v1/models`` listing what the gateway serves, pass-through prefixes included."""

from __future__ import annotations

from collections.abc import Callable

import anthropic
import openai
import pytest

from tests.gateway.conftest import KEY, Rows, Served, config_table
from tests.llm_loopback import LoopbackLLM, Reply

MESSAGES = [{"role": "user", "content": "How many tokens is this?"}]
SERVED = [
    "claude-haiku",
    "gpt-4o-mini",
    "openrouter/<model>",
    "openai/<model>",
    "anthropic/<model>",
]


@pytest.fixture
def via_loopback(loopback: LoopbackLLM, serve_gateway: Callable[..., Served]) -> Served:
    url = loopback.url
    return serve_gateway(config_table(url + "/v1", url, url + "/api/v1"))


def claude(served: Served) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=KEY, base_url=served.url, max_retries=0)


def test_anthropic_sdk_count_tokens_gets_anthropics_own_count_and_makes_no_row(
    loopback: LoopbackLLM, via_loopback: Served, rows: Rows
) -> None:
    loopback.queue(Reply(b'{"input_tokens": 14}', headers={"content-type": "application/json"}))
    with claude(via_loopback) as client:
        counted = client.messages.count_tokens(
            model="claude-haiku",
            system="You count.",
            messages=MESSAGES,  # type: ignore[arg-type]
        )
    assert counted.input_tokens == 14
    (sent,) = loopback.requests
    assert sent.path == "/v1/messages/count_tokens"
    assert sent.body == {
        "model": "claude-haiku-4-5-20251001",
        "system": "You count.",
        "messages": MESSAGES,
    }
    assert sent.headers["x-api-key"] == "sk-ant-provider-secret-0002"
    assert rows.events == []  # counting is free and is not a call


def test_count_tokens_passes_anthropics_own_error_on_in_its_shape(
    loopback: LoopbackLLM, via_loopback: Served
) -> None:
    error = b'{"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}'
    loopback.queue(Reply(error, status=400, headers={"content-type": "application/json"}))
    with claude(via_loopback) as client, pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.count_tokens(model="claude-haiku", messages=MESSAGES)  # type: ignore[arg-type]
    assert "bad" in caught.value.message


def test_count_tokens_for_a_model_served_first_by_openai_is_a_400_saying_what_to_use(
    loopback: LoopbackLLM, via_loopback: Served
) -> None:
    with claude(via_loopback) as client, pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.count_tokens(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    assert "served first by openai" in caught.value.message
    assert "first route is Anthropic" in caught.value.message
    assert loopback.requests == []


def test_models_lists_the_public_names_and_each_pass_through_prefix_for_both_sdks(
    gateway: Served,
) -> None:
    with openai.OpenAI(api_key=KEY, base_url=gateway.url + "/v1", max_retries=0) as client:
        listed = list(client.models.list())
        one = client.models.retrieve("openrouter/qwen/qwen3-coder")
        with pytest.raises(openai.NotFoundError) as caught:
            client.chat.completions.create(model="nope", messages=MESSAGES)  # type: ignore[arg-type]
    assert [m.id for m in listed] == SERVED
    assert listed[2].owned_by == "openrouter"
    assert "openrouter/" in (listed[2].model_extra or {})["description"]
    assert (one.id, one.owned_by) == ("openrouter/qwen/qwen3-coder", "openrouter")
    assert "'openrouter/<model>'" in caught.value.message  # the 404 points at what is listed
    with claude(gateway) as c:
        assert [m.id for m in c.models.list()] == SERVED
        assert c.models.retrieve("claude-haiku").id == "claude-haiku"
        with pytest.raises(anthropic.NotFoundError):
            c.models.retrieve("nope")
