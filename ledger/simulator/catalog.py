"""What the simulated services serve: models, their upstream pools, prices and behaviour.

Pure data. A :class:`Catalog` maps each service (``openrouter``, ``openai``,
``anthropic``) to its models; each model is a :class:`ModelPool` of
:class:`UpstreamSpec` s. Direct providers are pools of one upstream (the
provider itself); OpenRouter pools hold several, each with its own prices,
latency, error rate and prompt cache, which is what makes routing matter.

Prices are USD per million tokens, as :class:`~decimal.Decimal`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Final, Literal

Service = Literal["openrouter", "openai", "anthropic"]
SERVICES: Final[tuple[Service, ...]] = ("openrouter", "openai", "anthropic")


@dataclass(frozen=True, slots=True)
class Latency:
    """Time to first token (log-normal around ``ttft_median_s``) plus decoding time."""

    ttft_median_s: float = 0.4
    ttft_sigma: float = 0.35
    tokens_per_s: float = 80.0

    def __post_init__(self) -> None:
        if self.ttft_median_s < 0 or self.ttft_sigma < 0 or self.tokens_per_s <= 0:
            raise ValueError(f"invalid latency {self}")


@dataclass(frozen=True, slots=True)
class UpstreamSpec:
    """One upstream endpoint serving a model.

    ``name`` is what OpenRouter reports in the response's top-level
    ``provider`` field ("Amazon Bedrock"); ``slug`` is what ``provider.order``
    / ``only`` / ``ignore`` name ("amazon-bedrock"). ``cache_read_per_mtok``
    None means the upstream has no prompt cache; ``cache_write_per_mtok``
    None means writes are free and not reported (OpenAI-style implicit
    caching), otherwise ``cache_write_tokens`` are reported and charged.
    ``capacity``: how many requests it serves at once (None: no limit); one more
    arriving while that many are in flight is refused with 429, so sending a
    model's whole traffic to one upstream can cost errors and fallbacks.
    """

    name: str
    slug: str
    input_per_mtok: Decimal
    output_per_mtok: Decimal
    cache_read_per_mtok: Decimal | None = None
    cache_write_per_mtok: Decimal | None = None
    #: The price of a 1-hour write (Anthropic: 2x input); None: the upstream keeps
    #: one lifetime (``cache_ttl_s``) whatever the request asks.
    cache_write_1h_per_mtok: Decimal | None = None
    min_cacheable_tokens: int = 1024
    cache_ttl_s: float = 300.0
    requires_cache_control: bool = False
    latency: Latency = field(default_factory=Latency)
    error_rate: float = 0.0
    reasoning_share: float = 0.0
    reported_model: str | None = None
    capacity: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.error_rate <= 1.0 or not 0.0 <= self.reasoning_share < 1.0:
            raise ValueError(f"{self.name}: error_rate/reasoning_share out of range")
        if self.capacity is not None and self.capacity < 1:
            raise ValueError(f"{self.name}: capacity must be at least 1 (None: no limit)")
        if self.input_per_mtok <= 0:
            raise ValueError(f"{self.name}: input price must be positive")

    @property
    def has_cache(self) -> bool:
        return self.cache_read_per_mtok is not None

    @property
    def sticky_eligible(self) -> bool:
        """OpenRouter pins only where a cache read is cheaper than a plain prompt token."""
        return (
            self.cache_read_per_mtok is not None and self.cache_read_per_mtok < self.input_per_mtok
        )

    def routing_weight(self) -> float:
        """OpenRouter's default load balancing: inverse square of the (input) price."""
        return 1.0 / math.pow(float(self.input_per_mtok), 2)


@dataclass(frozen=True, slots=True)
class ModelPool:
    """The upstreams serving one model on one service."""

    model: str
    upstreams: tuple[UpstreamSpec, ...]

    def __post_init__(self) -> None:
        if not self.upstreams:
            raise ValueError(f"model {self.model} has no upstream")
        names = [u.name for u in self.upstreams]
        if len(set(names)) != len(names):
            raise ValueError(f"model {self.model}: duplicate upstream names {names}")

    def upstream(self, name: str) -> UpstreamSpec:
        for spec in self.upstreams:
            if spec.name == name or spec.slug == name.lower():
                return spec
        raise KeyError(f"{self.model} has no upstream {name!r}")

    def with_upstream(self, name: str, **changes: object) -> ModelPool:
        """A copy with one upstream's fields changed (prices, latency, error_rate...)."""
        target = self.upstream(name)
        ups = tuple(replace(u, **changes) if u is target else u for u in self.upstreams)  # type: ignore[arg-type]
        return ModelPool(self.model, ups)


@dataclass(frozen=True, slots=True)
class Catalog:
    """Models per service."""

    openrouter: dict[str, ModelPool]
    openai: dict[str, ModelPool]
    anthropic: dict[str, ModelPool]

    def pools(self, service: Service) -> dict[str, ModelPool]:
        pools: dict[str, ModelPool] = getattr(self, service)
        return pools

    def with_pool(self, service: Service, pool: ModelPool) -> Catalog:
        """A copy with ``pool`` added or replacing the model of the same name."""
        pools = {**self.pools(service), pool.model: pool}
        return replace(self, **{service: pools})


def _d(value: str) -> Decimal:
    return Decimal(value)


def _anthropic_family(name: str, slug: str, latency: Latency, error_rate: float) -> UpstreamSpec:
    return UpstreamSpec(
        name=name,
        slug=slug,
        input_per_mtok=_d("3"),
        output_per_mtok=_d("15"),
        cache_read_per_mtok=_d("0.30"),
        cache_write_per_mtok=_d("3.75"),
        cache_write_1h_per_mtok=_d("6"),
        min_cacheable_tokens=1024,
        requires_cache_control=True,
        latency=latency,
        error_rate=error_rate,
        reported_model="anthropic/claude-4.5-sonnet-20250929",
    )


def _open_weights(name: str, slug: str, price: str, read: str | None, ttft: float) -> UpstreamSpec:
    return UpstreamSpec(
        name=name,
        slug=slug,
        input_per_mtok=_d(price),
        output_per_mtok=_d(price) * 4,
        cache_read_per_mtok=None if read is None else _d(read),
        min_cacheable_tokens=512,
        latency=Latency(ttft_median_s=ttft, tokens_per_s=120.0),
        error_rate=0.01,
    )


def default_catalog() -> Catalog:
    """A realistic default: three OpenRouter models, OpenAI and Anthropic direct."""
    gpt_mini = (
        UpstreamSpec(
            name="OpenAI",
            slug="openai",
            input_per_mtok=_d("0.15"),
            output_per_mtok=_d("0.60"),
            cache_read_per_mtok=_d("0.075"),
            latency=Latency(ttft_median_s=0.35, tokens_per_s=90.0),
            error_rate=0.005,
            reported_model="openai/gpt-4o-mini",
        ),
        UpstreamSpec(
            name="Azure",
            slug="azure",
            input_per_mtok=_d("0.15"),
            output_per_mtok=_d("0.60"),
            cache_read_per_mtok=_d("0.075"),
            latency=Latency(ttft_median_s=0.45, tokens_per_s=70.0),
            error_rate=0.01,
            reported_model="openai/gpt-4o-mini",
        ),
    )
    sonnet = (
        _anthropic_family("Anthropic", "anthropic", Latency(0.6, 0.3, 60.0), 0.01),
        # The measurably worse pin candidate: slower first byte and more errors.
        _anthropic_family("Amazon Bedrock", "amazon-bedrock", Latency(1.4, 0.5, 45.0), 0.04),
        _anthropic_family("Google Vertex", "google-vertex", Latency(0.7, 0.3, 55.0), 0.01),
    )
    qwen = (
        _open_weights("DeepInfra", "deepinfra", "0.20", "0.05", 0.5),
        _open_weights("Together", "together", "0.22", "0.11", 0.4),
        _open_weights("Fireworks", "fireworks", "0.22", "0.11", 0.3),
        _open_weights("Novita", "novita", "0.24", None, 0.6),
        _open_weights("Parasail", "parasail", "0.25", "0.125", 0.5),
        _open_weights("Baseten", "baseten", "0.26", "0.065", 0.35),
    )
    openrouter = {
        "openai/gpt-4o-mini": ModelPool("openai/gpt-4o-mini", gpt_mini),
        "anthropic/claude-sonnet-4.5": ModelPool("anthropic/claude-sonnet-4.5", sonnet),
        "qwen/qwen3-coder": ModelPool("qwen/qwen3-coder", qwen),
    }
    openai = {
        "gpt-4o-mini": ModelPool(
            "gpt-4o-mini",
            (replace(gpt_mini[0], reported_model="gpt-4o-mini-2024-07-18"),),
        ),
    }
    haiku = UpstreamSpec(
        name="Anthropic",
        slug="anthropic",
        input_per_mtok=_d("1"),
        output_per_mtok=_d("5"),
        cache_read_per_mtok=_d("0.10"),
        cache_write_per_mtok=_d("1.25"),
        cache_write_1h_per_mtok=_d("2"),
        min_cacheable_tokens=4096,
        requires_cache_control=True,
        latency=Latency(ttft_median_s=0.45, tokens_per_s=110.0),
        error_rate=0.005,
        reported_model="claude-haiku-4-5-20251001",
    )
    anthropic = {
        "claude-haiku-4-5-20251001": ModelPool("claude-haiku-4-5-20251001", (haiku,)),
        "claude-sonnet-4-5-20250929": ModelPool(
            "claude-sonnet-4-5-20250929",
            (replace(sonnet[0], reported_model="claude-sonnet-4-5-20250929"),),
        ),
    }
    return Catalog(openrouter=openrouter, openai=openai, anthropic=anthropic)
