"""OpenRouter's generation stats, parsed from a real response."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from ledger.reconcile.generation import BadGeneration, parse_generation

PAYLOAD = Path(__file__).resolve().parents[1] / "fixtures" / "payloads"


def test_the_real_generation_gives_its_billed_cost_and_figures() -> None:
    generation = parse_generation(
        (PAYLOAD / "billing" / "openrouter_generation_real.json").read_bytes()
    )
    assert generation.id == "gen-1771967973-0hZ8J5kY7qLMOKbPx0u3"
    assert generation.total_cost == Decimal("0.00003452")
    assert generation.provider_name == "DeepInfra"
    assert generation.billing == {
        "upstream_inference_cost": "0",
        "native_tokens_prompt": 64,
        "native_tokens_completion": 98,
        "native_tokens_cached": 0,
        "native_tokens_reasoning": 0,
        "provider_name": "DeepInfra",
        "model": "meta-llama/llama-4-scout-17b-16e-instruct",
    }
    # Unknown fields are kept, not fatal.
    assert generation.raw["provider_responses"][0]["status"] == 200


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[]", b'{"data": null}', b'{"data": {"total_cost": "x"}}', b'{"data": {}}'],
)
def test_a_body_that_is_not_a_generation_is_refused(body: bytes) -> None:
    with pytest.raises(BadGeneration):
        parse_generation(body)


def test_a_new_field_does_not_break_parsing() -> None:
    real = json.loads((PAYLOAD / "billing" / "openrouter_generation_real.json").read_text())
    real["data"]["some_future_field"] = {"nested": [1, 2]}
    generation = parse_generation(json.dumps(real).encode())
    assert generation.total_cost == Decimal("0.00003452")
