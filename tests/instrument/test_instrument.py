"""instrument()/uninstrument() on clients already built, and request recognition."""

from __future__ import annotations

import anthropic
import httpx
import httpx2
import openai
import pytest

import ledger
from ledger.errors import ProviderConfigurationError
from ledger.instrument import AsyncMeteringTransport, MeteringTransport, is_instrumented
from ledger.instrument.recognise import Recogniser, refine
from tests.instrument.conftest import Rows
from tests.llm_loopback import LoopbackLLM, Reply


def test_instrument_is_idempotent_and_reversible(loopback: LoopbackLLM, rows: Rows) -> None:
    loopback.default = Reply.payload("openai_chat_cached_real.json")
    client = openai.OpenAI(api_key="sk-x", base_url=loopback.url + "/v1", max_retries=0)
    original = client._client._transport
    ledger.instrument(client, ledger=rows)
    ledger.instrument(client, ledger=rows)
    wrapped = client._client._transport
    assert isinstance(wrapped, MeteringTransport) and wrapped.inner is original
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    ledger.uninstrument(client)
    ledger.uninstrument(client)
    assert client._client._transport is original and not is_instrumented(client)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert len(rows.events) == 1 and len(loopback.requests) == 2


def test_async_sdk_clients_get_the_async_transport() -> None:
    client = anthropic.AsyncAnthropic(api_key="sk-ant-x")
    ledger.instrument(client, ledger=Rows())
    assert isinstance(client._client._transport, AsyncMeteringTransport)


def test_instrumenting_something_else_says_what_it_expected() -> None:
    with pytest.raises(TypeError, match="httpx/httpx2 client"):
        ledger.instrument(object())


def test_proxy_mounts_are_metered_as_well() -> None:
    http = httpx2.Client(mounts={"http://example.test": httpx2.HTTPTransport()})
    ledger.instrument(http, ledger=Rows())
    assert all(isinstance(t, MeteringTransport) for t in http._mounts.values())
    ledger.uninstrument(http)
    assert all(isinstance(t, httpx2.HTTPTransport) for t in http._mounts.values())


@pytest.mark.parametrize(
    ("method", "url", "anthropic_header", "expected"),
    [
        ("POST", "https://api.openai.com/v1/chat/completions", False, "openai"),
        ("POST", "https://openrouter.ai/api/v1/chat/completions", False, "openrouter"),
        ("POST", "https://api.anthropic.com/v1/messages", True, "anthropic"),
        ("POST", "https://gw.example/v1/messages", True, "anthropic"),
        ("POST", "https://api.groq.com/openai/v1/chat/completions", False, "groq"),
        ("POST", "https://api.deepseek.com/chat/completions", False, "deepseek"),
        (
            "POST",
            "https://me.openai.azure.com/openai/deployments/gpt4o/chat/completions?api-version=1",
            False,
            "azure_openai",
        ),
        ("POST", "http://localhost:8000/v1/chat/completions", False, "openai_compatible"),
        ("POST", "http://gw.local/api/v1/chat/completions", False, "openrouter"),
        ("GET", "https://api.openai.com/v1/chat/completions", False, None),
        ("POST", "https://api.openai.com/v1/embeddings", False, None),
        ("POST", "https://api.openai.com/v1/threads/t_1/messages", False, None),
        ("POST", "https://api.anthropic.com/v1/messages/count_tokens", True, None),
        ("POST", "https://api.anthropic.com/v1/messages/batches", True, None),
        ("POST", "https://api.openai.com/v1/responses", False, "openai"),
        ("POST", "https://openrouter.ai/api/v1/responses", False, "openrouter"),
        ("POST", "http://gw.local/api/v1/responses", False, "openrouter"),
        ("POST", "http://localhost:8000/v1/responses", False, "openai_compatible"),
        ("POST", "https://api.groq.com/openai/v1/responses", False, "groq"),
        ("POST", "https://me.openai.azure.com/openai/v1/responses", False, "azure_openai"),
        (
            "POST",
            "https://me.openai.azure.com/openai/responses?api-version=1",
            False,
            "azure_openai",
        ),
        ("GET", "https://api.openai.com/v1/responses/resp_1", False, None),
        ("POST", "https://api.openai.com/v1/responses/resp_1/cancel", False, None),
        ("POST", "https://api.openai.com/v1/responses/input_tokens", False, None),
        ("POST", "https://api.openai.com/v1/responses/compact", False, None),
        ("POST", "https://api.anthropic.com/v1/responses", False, None),
        ("POST", "http://localhost:8000/survey/responses", False, None),
    ],
)
def test_recognition_by_url(
    method: str, url: str, anthropic_header: bool, expected: str | None
) -> None:
    parsed = httpx.URL(url)
    route = Recogniser().route(method, url, parsed.host, parsed.path, anthropic_header)
    assert (route.provider if route else None) == expected


def test_azure_route_files_the_deployment_as_the_model() -> None:
    url = "https://me.openai.azure.com/openai/deployments/gpt4o/chat/completions?api-version=1"
    route = Recogniser().route("POST", url, "me.openai.azure.com", httpx.URL(url).path, False)
    assert route is not None
    assert (route.deployment, route.base_url) == ("gpt4o", "https://me.openai.azure.com")


def test_body_reveals_openrouter_behind_an_unknown_host() -> None:
    route = Recogniser().route(
        "POST", "http://gw/v1/chat/completions", "gw", "/v1/chat/completions", False
    )
    assert route is not None
    assert refine(route, {"model": "m", "provider": {"sort": "price"}}).provider == "openrouter"
    assert refine(route, {"model": "m"}).provider == "openai_compatible"


def test_responses_routes_name_their_endpoint_and_base() -> None:
    url = "https://openrouter.ai/api/v1/responses"
    route = Recogniser().route("POST", url, "openrouter.ai", "/api/v1/responses", False)
    assert route is not None
    assert (route.endpoint, route.base_url) == ("responses", "https://openrouter.ai/api/v1")
    guessed = Recogniser().route("POST", "http://gw/v1/responses", "gw", "/v1/responses", False)
    assert guessed is not None
    refined = refine(guessed, {"model": "m", "provider": {"sort": "price"}})
    assert (refined.provider, refined.endpoint) == ("openrouter", "responses")


def test_mapping_to_an_unknown_provider_is_refused() -> None:
    with pytest.raises(ProviderConfigurationError, match="unknown provider"):
        Recogniser({"http://x": "nope"})


def test_explicit_mapping_beats_the_path_guess() -> None:
    rec = Recogniser({"http://gw/api/v1": "openai_compatible"})
    route = rec.route(
        "POST", "http://gw/api/v1/chat/completions", "gw", "/api/v1/chat/completions", False
    )
    assert route is not None and route.provider == "openai_compatible"
