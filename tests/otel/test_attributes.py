"""Every attribute name the exporter writes, checked against the installed semconv package."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import opentelemetry.semconv._incubating.attributes as incubating
import opentelemetry.semconv.attributes as stable

from ledger.otel import attributes as attr


def _documented(package: object) -> dict[str, str]:
    """``attribute name -> its docstring`` over every module of a semconv attributes package."""
    names: dict[str, str] = {}
    for info in pkgutil.iter_modules(package.__path__):  # type: ignore[attr-defined]
        module = importlib.import_module(f"{package.__name__}.{info.name}")  # type: ignore[attr-defined]
        assert module.__file__ is not None
        tree = ast.parse(Path(module.__file__).read_text("utf-8"))
        body = tree.body
        for node, after in zip(body, [*body[1:], None], strict=True):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                doc = ""
                if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                    doc = str(after.value.value)
                names[node.value.value] = doc.strip()
    return names


STABLE = _documented(stable)
DEVELOPMENT = _documented(incubating)


def test_every_standard_name_is_defined_by_semconv_and_none_is_replaced() -> None:
    for name in attr.STANDARD_ATTRIBUTES:
        doc = STABLE.get(name, DEVELOPMENT.get(name))
        assert doc is not None, f"{name} is not a semantic-conventions attribute"
        # semconv 0.66 marks every gen_ai.* name "Moved to the GenAI semantic conventions
        # repository"; a real deprecation says what replaced it.
        assert "Replaced by" not in doc, f"{name} is deprecated: {doc}"


def test_which_names_are_stable_and_which_are_still_development() -> None:
    stable_names = {n for n in attr.STANDARD_ATTRIBUTES if n in STABLE}
    assert stable_names == {
        "error.type",
        "http.response.status_code",
        "server.address",
        "server.port",
    }
    development = set(attr.STANDARD_ATTRIBUTES) - stable_names
    assert all(n.startswith("gen_ai.") for n in development)
    assert all(n in DEVELOPMENT for n in development)


def test_the_issue_s_list_of_names_is_what_the_exporter_uses() -> None:
    wanted = {
        "gen_ai.operation.name",
        "gen_ai.provider.name",
        "gen_ai.request.model",
        "gen_ai.response.model",
        "gen_ai.response.id",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.usage.cache_creation.input_tokens",
        "gen_ai.usage.reasoning.output_tokens",
        "gen_ai.conversation.id",
        "gen_ai.agent.id",
        "error.type",
    }
    assert wanted <= set(attr.STANDARD_ATTRIBUTES)
    assert attr.TOKEN_USAGE_METRIC == "gen_ai.client.token.usage"
    assert attr.DURATION_METRIC == "gen_ai.client.operation.duration"


def test_ledger_names_stay_in_their_namespace_and_clash_with_no_convention() -> None:
    assert all(n.startswith("ledger.") for n in attr.LEDGER_ATTRIBUTES)
    assert len(set(attr.LEDGER_ATTRIBUTES)) == len(attr.LEDGER_ATTRIBUTES)
    assert not set(attr.LEDGER_ATTRIBUTES) & (set(STABLE) | set(DEVELOPMENT))
    # Every ledger.* name is documented in the module's table.
    assert attr.__doc__ is not None
    assert all(f"``{n}``" in attr.__doc__ for n in attr.LEDGER_ATTRIBUTES)


def test_provider_names_are_semconv_s_well_known_values_and_map_back_to_our_providers() -> None:
    from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import (
        GenAiProviderNameValues,
    )

    from ledger.providers import PROVIDERS

    well_known = {v.value for v in GenAiProviderNameValues}
    assert set(attr.PROVIDER_NAMES.values()) <= well_known
    assert attr.provider_name("azure_openai") == "azure.ai.openai"
    for value, ours in attr.PROVIDERS_BY_NAME.items():
        assert value in well_known and ours in PROVIDERS
        assert attr.provider_name(ours) == value
    # Our names that are semconv values already pass through unchanged.
    for ours in ("openai", "anthropic", "groq", "deepseek"):
        assert attr.provider_name(ours) in well_known


def test_openinference_names_are_documented_and_apart_from_the_others() -> None:
    names = set(attr.OPENINFERENCE_ATTRIBUTES)
    assert len(names) == len(attr.OPENINFERENCE_ATTRIBUTES)
    assert all(n.startswith(("llm.", "openinference.")) for n in names)
    assert not names & (set(attr.STANDARD_ATTRIBUTES) | set(attr.LEDGER_ATTRIBUTES))
    assert attr.__doc__ is not None and "``llm.cost.total``" in attr.__doc__
