"""What Arize Phoenix reads off the ledger's spans to price them.

Phoenix (Arize-ai/phoenix at 9478f954, ``src/phoenix``) prices a span itself: no
``llm.cost.*`` attribute is read. ``trace/otel.py`` derives OpenInference
attributes from ``gen_ai.*`` ones with ``setdefault`` (attributes the span already
carries win) and unflattens the dotted names; ``server/cost_tracking/`` then finds
a price by ``llm.model_name`` (and ``llm.provider``, ``cost_model_lookup.py``) and
multiplies it by ``llm.token_count.prompt``/``completion``/``total``
(``helpers.py``) and the ``llm.token_count.prompt_details``/``completion_details``
breakdowns (``cost_details_calculator.py``). These tests hold the exporter's spans
to exactly those names, and port the token split Phoenix makes from them, so a
Phoenix price equal to the ledger's gives the ledger's cost. The ledger's own
figure travels as ``llm.cost.total`` (shown among the span's attributes).

A test that starts Phoenix itself is not here: ``arize-phoenix`` does not install
into the locked environment without downgrading packages the project pins.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from ledger.otel import attributes as attr
from ledger.pricing import computed_cost
from ledger.providers.base import Usage
from tests.otel.helpers import full_event

#: Every name Phoenix's cost code reads, and where.
PHOENIX_READS = {
    "openinference.span.kind": "trace/otel.py (an LLM span)",
    "llm.model_name": "cost_tracking/cost_model_lookup.py",
    "llm.provider": "cost_tracking/cost_model_lookup.py",
    "llm.token_count.prompt": "cost_tracking/helpers.py",
    "llm.token_count.completion": "cost_tracking/helpers.py",
    "llm.token_count.total": "cost_tracking/helpers.py",
    "llm.token_count.prompt_details": "cost_tracking/cost_details_calculator.py",
    "llm.token_count.completion_details": "cost_tracking/cost_details_calculator.py",
}


def unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    """Dotted names as nested dicts, as Phoenix's ``unflatten`` stores span attributes."""
    nested: dict[str, Any] = {}
    for name, value in flat.items():
        *parents, leaf = name.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def get(nested: dict[str, Any], name: str) -> Any:
    node: Any = nested
    for part in name.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def phoenix_token_split(nested: dict[str, Any]) -> dict[str, int]:
    """Phoenix's token types for a span: the details, then what is left of the totals
    as ``input``/``output`` (``SpanCostDetailsCalculator.calculate_details``)."""
    split: dict[str, int] = {}
    for prefix, rest in (("prompt", "input"), ("completion", "output")):
        details = get(nested, f"llm.token_count.{prefix}_details") or {}
        counted = {f"{prefix}.{k}": int(v) for k, v in details.items()}
        split.update(counted)
        total = int(get(nested, f"llm.token_count.{prefix}") or 0)
        split[rest] = total - sum(counted.values())
    return split


def test_each_name_phoenix_reads_for_cost_is_on_the_span_with_the_ledger_s_value() -> None:
    event = full_event(provider="anthropic", model="claude-sonnet-4-20250514")
    nested = unflatten(attr.span_attributes(event))
    present = {name for name in PHOENIX_READS if get(nested, name) is not None}
    assert present == set(PHOENIX_READS)
    assert get(nested, "openinference.span.kind") == "LLM"
    assert get(nested, "llm.model_name") == "claude-sonnet-4-20250514"  # the model served
    assert get(nested, "llm.provider") == "anthropic"
    assert get(nested, "llm.token_count.total") == event.input_tokens + event.output_tokens
    assert get(nested, "llm.cost.total") == float(event.cost_usd or 0)


def test_phoenix_splits_the_tokens_so_the_ledger_s_rates_give_the_ledger_s_cost() -> None:
    # 2048 in (1920 cache reads, 64 writes), 180 out (40 reasoning)
    event = full_event(provider="anthropic", model=MODEL)
    split = phoenix_token_split(unflatten(attr.span_attributes(event)))
    assert split == {
        "input": 2048 - 1920 - 64,
        "prompt.cache_read": 1920,
        "prompt.cache_write": 64,
        "output": 180 - 40,
        "completion.reasoning": 40,
    }
    # Phoenix's price per token type, set to the ledger's own rates (what a Phoenix
    # custom model in Settings > Models would hold), read off the ledger's price table
    # one token type at a time.
    m = 10**6
    unit = {
        "input": Usage(input_tokens=m),
        "prompt.cache_read": Usage(input_tokens=m, cache_read_tokens=m),
        "prompt.cache_write": Usage(input_tokens=m, cache_write_tokens=m),
        "output": Usage(output_tokens=m),
        "completion.reasoning": Usage(output_tokens=m, reasoning_tokens=m),
    }
    rate = {kind: _ledger_price(usage) / m for kind, usage in unit.items()}
    phoenix = sum(split[kind] * rate[kind] for kind in split)
    ledger = _ledger_price(
        Usage(
            input_tokens=event.input_tokens,
            output_tokens=event.output_tokens,
            cache_read_tokens=event.cache_read_tokens,
            cache_write_tokens=event.cache_write_tokens,
            reasoning_tokens=event.reasoning_tokens,
        )
    )
    assert phoenix == ledger > 0


MODEL = "claude-sonnet-4-20250514"


def _ledger_price(usage: Usage) -> Decimal:
    cost = computed_cost(usage, MODEL, provider="anthropic", provider_id="anthropic")
    assert cost is not None
    return cost


def test_a_fallback_attempt_is_priced_as_the_model_it_asked_for_when_none_answered() -> None:
    event = full_event(
        requested_model="gpt-4o-mini",
        attempt_model="claude-haiku-4-5",
        provider="anthropic",
        model=None,
        status="error",
        error_type="server_error",
    )
    flat = attr.span_attributes(event)
    assert flat["llm.model_name"] == flat["gen_ai.request.model"] == "claude-haiku-4-5"
    assert flat["llm.provider"] == "anthropic"
