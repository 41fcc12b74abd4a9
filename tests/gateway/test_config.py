"""The gateway configuration: found like the budgets file, every mistake named precisely."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger.gateway import GatewayConfigurationError, Target, hash_key, load_config, parse_config

DIGEST = hash_key("lgw-some-key")


def _table(**changes: Any) -> dict[str, Any]:
    table: dict[str, Any] = {
        "models": {"gpt-4o-mini": ["openai:gpt-4o-mini", "anthropic:claude-haiku-4-5-20251001"]},
        "passthrough": ["openrouter"],
        "keys": {"search": {"sha256": DIGEST, "tags": {"team": "search"}}},
    }
    table.update(changes)
    return table


def test_a_public_name_maps_to_its_chain_and_a_prefix_passes_through() -> None:
    config = parse_config(_table())
    assert config.chain("gpt-4o-mini") == (
        Target("openai", "gpt-4o-mini"),
        Target("anthropic", "claude-haiku-4-5-20251001"),
    )
    assert config.chain("openrouter/deepseek/deepseek-chat") == (
        Target("openrouter", "deepseek/deepseek-chat"),
    )
    assert config.chain("openai/gpt-4o") is None  # openai is not a passthrough prefix here
    assert config.chain("unknown") is None
    assert config.keys[0].tags == {"team": "search"}


@pytest.mark.parametrize(
    ("changes", "key", "expected"),
    [
        ({"modles": {}}, "tool.ledger.gateway.modles", "one of"),
        ({"models": {"x": ["openai"]}}, 'tool.ledger.gateway.models."x"[0]', '"provider:model"'),
        ({"models": {"x": ["nope:m"]}}, 'tool.ledger.gateway.models."x"[0]', "a provider name"),
        ({"models": {"x": ["gemini:m"]}}, 'tool.ledger.gateway.models."x"[0]', "chat completions"),
        ({"models": {"x": []}}, 'tool.ledger.gateway.models."x"', "non-empty list"),
        ({"passthrough": "openrouter"}, "tool.ledger.gateway.passthrough", "a list"),
        ({"keys": {}}, "tool.ledger.gateway.keys", "at least one gateway key"),
        ({"keys": {"a": {"sha256": "abc"}}}, "tool.ledger.gateway.keys.a.sha256", "64 hex"),
        ({"rate_limit": "lots"}, "tool.ledger.gateway.rate_limit", "N/W"),
        ({"auth": "maybe"}, "tool.ledger.gateway.auth", '"keys" or "none"'),
        ({"timeout_s": 0}, "tool.ledger.gateway.timeout_s", "positive"),
        (
            {"providers": {"openai": {"url": "x"}}},
            "tool.ledger.gateway.providers.openai.url",
            "base_url or api_key_env",
        ),
    ],
)
def test_mistakes_name_the_key_and_what_was_expected(
    changes: dict[str, Any], key: str, expected: str
) -> None:
    with pytest.raises(GatewayConfigurationError) as caught:
        parse_config(_table(**changes))
    assert caught.value.key == key
    assert expected in caught.value.expected


def test_a_pasted_key_is_never_echoed_in_the_error() -> None:
    with pytest.raises(GatewayConfigurationError) as caught:
        parse_config(_table(keys={"a": {"sha256": "lgw-the-secret-itself"}}))
    assert "lgw-the-secret-itself" not in str(caught.value)


def test_no_keys_needs_auth_none_said_explicitly() -> None:
    assert parse_config(_table(keys={}, auth="none")).auth == "none"


def test_found_in_ledger_toml_or_pyproject(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEDGER_GATEWAY_FILE", raising=False)
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n[tool.ledger.gateway]\nauth = "none"\npassthrough = ["openai"]\n'
    )
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    assert load_config(start=nested).passthrough == ("openai",)
    (tmp_path / "ledger.toml").write_text('[gateway]\nauth = "none"\npassthrough = ["groq"]\n')
    assert load_config(start=nested).passthrough == ("groq",)
    (tmp_path / "ledger.toml").write_text('[gateway]\nauth = "none"\nbudgets = "yes"\n')
    with pytest.raises(GatewayConfigurationError, match=r"ledger\.toml: gateway\.budgets"):
        load_config(start=nested)


def test_no_configuration_at_all_says_where_to_put_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LEDGER_GATEWAY_FILE", raising=False)
    with pytest.raises(GatewayConfigurationError, match=r"\[tool\.ledger\.gateway\]"):
        load_config(start=tmp_path)


def test_a_provider_without_its_key_fails_when_the_app_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ledger.errors import ProviderConfigurationError
    from ledger.gateway import GatewayApp

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-1")
    with pytest.raises(ProviderConfigurationError, match="anthropic: no API key"):
        GatewayApp(parse_config(_table(passthrough=[])), ledger=_Discard())


class _Discard:
    def record(self, event: object) -> str:
        return ""
