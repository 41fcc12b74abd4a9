"""Declared capabilities and parsers, and the construction-time checks of the declarations."""

from __future__ import annotations

import json
from typing import Any, get_args

import pytest
from click.testing import CliRunner

from ledger.cli import cli
from ledger.errors import ProviderConfigurationError
from ledger.providers import PROVIDERS, AnthropicProvider, Capabilities, ChatRequest
from ledger.providers.base import Endpoint
from ledger.providers.openai_compat import OpenAIProvider, OpenAIStyleProvider

ENDPOINTS: tuple[Endpoint, ...] = get_args(Endpoint)


def test_sticky_session_is_declared_by_openrouter_only() -> None:
    sticky = {name for name, cls in PROVIDERS.items() if cls.capabilities.sticky_session}
    assert sticky == {"openrouter"}


def test_declaring_sticky_sessions_without_the_hook_fails_at_construction() -> None:
    class Pretender(OpenAIStyleProvider):
        name = "pretender"
        capabilities = Capabilities(
            sticky_session=True,
            prompt_caching="none",
            streaming_usage=True,
            reports_cost=False,
            reports_upstream=False,
        )
        default_base_url = "http://127.0.0.1:9"
        api_key_required = False

    with pytest.raises(ProviderConfigurationError, match="place_session_key"):
        Pretender()


def test_declaring_two_endpoints_without_saying_which_parser_reads_which_fails() -> None:
    class Bilingual(AnthropicProvider):
        name = "bilingual"
        endpoints = frozenset({"messages", "chat"})

    with pytest.raises(ProviderConfigurationError, match="parsers"):
        Bilingual(api_key="k")


def test_each_provider_declares_the_endpoints_it_parses() -> None:
    offered = {
        name: {e for e in ENDPOINTS if cls(api_key="k", base_url="http://h").parsers(e)}
        for name, cls in PROVIDERS.items()
    }
    family = {"chat", "responses"}
    assert offered == {
        **{name: family for name in PROVIDERS if name not in ("anthropic", "gemini")},
        "anthropic": {"messages"},
        "gemini": set(),
    }
    assert all(offered[name] == cls.endpoints for name, cls in PROVIDERS.items())


def test_the_declared_responses_parsers_read_the_responses_format() -> None:
    body = json.dumps(
        {
            "object": "response",
            "model": "gpt-5",
            "status": "completed",
            "output": [],
            "usage": {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10},
        }
    ).encode()
    parsers = OpenAIProvider(api_key="k").parsers("responses")
    assert parsers is not None
    usage = parsers.body(body).usage
    assert usage is not None and (usage.input_tokens, usage.output_tokens) == (7, 3)
    assert parsers.stream().finish().usage is None


def test_a_key_reaches_the_body_only_where_the_capability_is_true() -> None:
    request = ChatRequest(model="m", messages=[], session_key="ledger:s")
    sent = {
        name: "session_id" in cls(api_key="k", base_url="http://h").build_request(request).body
        for name, cls in PROVIDERS.items()
        if name != "gemini"
    }
    assert sent == {name: name == "openrouter" for name in sent}


def test_openai_uses_max_completion_tokens() -> None:
    body = (
        OpenAIProvider(api_key="k")
        .build_request(ChatRequest(model="o3", messages=[], max_tokens=5))
        .body
    )
    assert body["max_completion_tokens"] == 5 and "max_tokens" not in body


def test_cli_lists_every_provider_with_its_capabilities_and_variables() -> None:
    result = CliRunner().invoke(cli, ["providers"], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80  # two tables that fit, not one of 150
    for name, provider in PROVIDERS.items():
        row = next(line.split() for line in lines if line.startswith(f"{name} "))
        assert row[1] in {"yes", "no"}  # a capability, not an environment variable
        assert provider.api_key_env is None or f" {provider.api_key_env} " in result.output
        assert provider.base_url_env is None or f" {provider.base_url_env}" in result.output
    openrouter = next(line.split() for line in lines if line.startswith("openrouter "))
    assert openrouter == ["openrouter", "yes", "explicit", "yes", "yes", "yes", "yes"]


def test_cli_json_is_the_capabilities_dto() -> None:
    import json

    result = CliRunner().invoke(cli, ["providers", "--json"])
    assert result.exit_code == 0
    data: dict[str, Any] = json.loads(result.output)
    by_name = {p["name"]: p for p in data["providers"]}
    assert list(by_name) == list(PROVIDERS)
    assert by_name["openrouter"]["capabilities"]["sticky_session"] is True
    assert by_name["anthropic"]["capabilities"]["prompt_caching"] == "explicit"
