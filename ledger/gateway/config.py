"""The gateway's configuration: ``[tool.ledger.gateway]`` in pyproject.toml or
``[gateway]`` in ledger.toml, checked with errors naming the file, key and what was expected.

Read by :mod:`ledger.config` (section ``gateway``), found like every section
(first found wins): an explicit path, the file named by ``LEDGER_GATEWAY_FILE``
(else ``LEDGER_CONFIG_FILE``), else the nearest ``ledger.toml`` (table ``[gateway]``)
or ``pyproject.toml`` with ``[tool.ledger.gateway]`` from the working directory up.

::

    [tool.ledger.gateway]
    passthrough = ["openrouter"]       # "openrouter/<model>" goes to OpenRouter as <model>
    session_prefix = "ledger"          # the sticky key is <prefix>:<session>:<actor> (ADR 0221)
    rate_limit = "600/1m"              # per gateway key (per client IP without keys); off if absent
    trusted_proxies = ""               # X-Forwarded-For from these (hops or CIDRs) for the IP key
    response_cache = true              # ADR-0016 response cache (never for paused turns)
    cache_ttl_s = 300
    budgets = true                     # refuse calls that could cross [tool.ledger.budgets]
    redis_url = "redis://127.0.0.1:6379/0"   # share limiter and cache between workers
    otlp = true                        # also take OTLP/HTTP traces on POST /v1/traces
    max_body_bytes = 33554432          # a larger request body: 413 before it is read
    body_budget_bytes = 50331648       # request bodies in flight at once; beyond: 503
    header_timeout_s = 10              # a connection's request head must be in by then
    body_idle_timeout_s = 30           # a body silent this long: 408
    max_connections = 4096             # beyond: 503 at once (default: no limit)
    default_retry_after_s = 1          # Retry-After when every route failed and none named one

    [tool.ledger.gateway.models]       # a public name -> the ADR-0014 chain, tried in order
    "gpt-4o-mini" = ["openai:gpt-4o-mini", "anthropic:claude-haiku-4-5-20251001"]

    [tool.ledger.gateway.providers.openai]   # optional: where and with which key
    base_url = "https://api.openai.com/v1"
    api_key_env = "OPENAI_API_KEY"

    [tool.ledger.gateway.keys.search]  # one table per gateway key: its SHA-256, its tags
    sha256 = "9b74c9897bac770ffc029102a200c5de…"   # ledger gateway hash-key
    tags = { team = "search" }

Without any ``keys`` table the gateway refuses to start unless ``auth = "none"``
says so explicitly (a local, single-user setup).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, Literal

from ledger import config as cfg
from ledger.errors import ConfigurationError
from ledger.errors import GatewayConfigurationError as GatewayConfigurationError
from ledger.gateway.intake import BODY_BUDGET_BYTES, MAX_BODY_BYTES
from ledger.providers import PROVIDERS
from ledger.resilience.config import parse_rate
from ledger.resilience.identity import ClientIdentity
from ledger.session_key import DEFAULT_PREFIX

ENV_GATEWAY_FILE: Final = "LEDGER_GATEWAY_FILE"
LEDGER_TOML: Final = cfg.LEDGER_TOML
PYPROJECT: Final = cfg.PYPROJECT

#: The two wire formats the gateway speaks: OpenAI chat completions, Anthropic messages.
Wire = Literal["chat", "messages"]

_SHA256: Final = re.compile(r"^[0-9a-f]{64}$")


def wire_of(provider: str) -> Wire | None:
    """The wire format a provider speaks, or None when the gateway cannot route to it."""
    cls = PROVIDERS.get(provider)
    endpoints = cls.endpoints if cls is not None else frozenset()
    if "chat" in endpoints:  # each provider declares the endpoints it reads
        return "chat"
    if "messages" in endpoints:
        return "messages"
    return None


@dataclass(frozen=True, slots=True)
class Target:
    """One step of a public model's chain: a provider name and the model it is asked for."""

    provider: str
    model: str

    @property
    def wire(self) -> Wire:
        wire = wire_of(self.provider)
        assert wire is not None  # checked when the configuration was read
        return wire


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    """Where a provider is reached and which environment variable holds its key."""

    base_url: str | None = cfg.setting(
        default=None, doc="where the provider is reached", example='"https://api.openai.com/v1"'
    )
    api_key_env: str | None = cfg.setting(
        default=None,
        doc="the environment variable holding its API key",
        example='"OPENAI_API_KEY"',
    )


@dataclass(frozen=True, slots=True)
class GatewayKey:
    """A gateway key as stored: its name, the SHA-256 hex of the secret, its row tags."""

    name: str
    sha256: str = cfg.setting(
        doc="the SHA-256 hex of the key (`ledger gateway hash-key`); never the key itself",
        example='"9b74c9897bac770ffc029102a200c5de9b74c9897bac770ffc029102a200c5de"',
    )
    tags: Mapping[str, str] = cfg.setting(
        default_factory=dict, doc="tags on every row this key makes", example='{ team = "search" }'
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class GatewayConfig:
    """Everything the gateway is told; see the module docstring."""

    models: Mapping[str, tuple[Target, ...]] = cfg.setting(
        default_factory=dict,
        doc='a public model name -> its routes "provider:model", tried in order (ADR-0014)',
        example='{ "gpt-4o-mini" = ["openai:gpt-4o-mini", "anthropic:claude-haiku-4-5-20251001"] }',
    )
    passthrough: tuple[str, ...] = cfg.setting(
        default=(),
        doc='providers whose "<provider>/<model>" names pass through as <model>',
        example='["openrouter"]',
    )
    providers: Mapping[str, ProviderSettings] = cfg.setting(
        default_factory=dict,
        doc="per provider: where it is reached and which variable holds its key",
        example='{ openai = { base_url = "https://api.openai.com/v1" } }',
    )
    keys: tuple[GatewayKey, ...] = cfg.setting(
        default=(),
        doc='one table per gateway key (required unless auth = "none")',
        example='{ search = { sha256 = "' + "c0ffee" * 10 + 'c0de" } }',
    )
    auth: Literal["keys", "none"] = cfg.setting(
        default="keys",
        doc='"none": no gateway key asked (a gateway only the machine itself reaches)',
        example='"none"',
    )
    session_prefix: str = cfg.setting(
        default=DEFAULT_PREFIX,
        doc="the sticky key sent is <prefix>:<session>:<actor> (ADR 0221)",
        example='"myapp"',
    )
    rate_limit: tuple[int, float] | None = cfg.setting(
        default=None,
        doc="requests per window per gateway key (per client IP without keys); off if absent",
        example='"600/1m"',
    )
    trusted_proxies: str = cfg.setting(
        default="",
        doc="X-Forwarded-For is believed from these (a hop count or CIDRs) for the IP key",
        example='"10.0.0.0/8"',
    )
    response_cache: bool = cfg.setting(
        default=False, doc="the ADR-0016 response cache (never for paused turns)", example="true"
    )
    cache_ttl_s: float = cfg.setting(
        default=300.0, doc="how long a cached response is served (seconds)", example="120"
    )
    budgets: bool = cfg.setting(
        default=False, doc="refuse calls that could cross the [budgets] section", example="true"
    )
    redis_url: str | None = cfg.setting(
        default=None,
        doc="share the limiter, cache and day budgets between workers",
        example='"redis://127.0.0.1:6379/0"',
    )
    #: Serve the OTLP/HTTP trace receiver (:mod:`ledger.otel.receiver`) on ``/v1/traces``.
    otlp: bool = cfg.setting(
        default=False, doc="also take OTLP/HTTP traces on POST /v1/traces", example="true"
    )
    #: ``Retry-After`` when every route failed and none said when to come back: short, so
    #: an SDK's default retries (2) end within seconds, as against the provider itself.
    default_retry_after_s: float = cfg.setting(
        default=1.0,
        doc="Retry-After when every route failed and none named one (seconds)",
        example="2",
    )
    timeout_s: float = cfg.setting(
        default=600.0, doc="an upstream attempt's time limit (seconds)", example="120"
    )
    #: A request body larger than this is refused (413) before it is read.
    max_body_bytes: int = cfg.setting(
        default=MAX_BODY_BYTES,
        doc="a larger request body: 413 before it is read",
        example="16777216",
    )
    #: The bytes of request bodies in flight at once (:mod:`ledger.gateway.intake`).
    body_budget_bytes: int = cfg.setting(
        default=BODY_BUDGET_BYTES,
        doc="request bodies in flight at once; beyond: 503 + Retry-After",
        example="67108864",
    )
    #: Seconds a connection has to send a whole request head, from its first byte (or
    #: from the connection's start); then it is closed.
    header_timeout_s: float = cfg.setting(
        default=10.0, doc="a connection's request head must be in by then (seconds)", example="5"
    )
    #: Seconds a request body may go without a byte before it is answered 408.
    body_idle_timeout_s: float = cfg.setting(
        default=30.0, doc="a body silent this long: 408 (seconds)", example="15"
    )
    #: Connections (or requests) at once before uvicorn answers 503 (None: no limit).
    max_connections: int | None = cfg.setting(
        default=None, doc="connections at once; beyond: 503 (default: no limit)", example="4096"
    )
    source: Path | None = None

    def chain(self, public: str) -> tuple[Target, ...] | None:
        """The chain serving the public model name ``public`` (None: not served here)."""
        found = self.models.get(public)
        if found is not None:
            return found
        prefix, sep, model = public.partition("/")
        if sep and model and prefix in self.passthrough:
            return (Target(prefix, model),)
        return None


SECTION: Final = cfg.Section(
    "gateway",
    GatewayConfig,
    GatewayConfigurationError,
    env_file=ENV_GATEWAY_FILE,
    summary="`ledger gateway`: the OpenAI/Anthropic-compatible front door.",
    tables=(("providers", "<provider>", ProviderSettings), ("keys", "<key>", GatewayKey)),
)
_SETTINGS: Final = cfg.keys_of(GatewayConfig)


# -- reading ------------------------------------------------------------------------------


def find_config(start: Path | None = None) -> Path | None:
    """The gateway configuration file that applies from ``start`` (default: the cwd)."""
    return cfg.find_file(SECTION, start)


def load_config(path: Path | None = None, *, start: Path | None = None) -> GatewayConfig:
    """Read and check the gateway table of ``path`` (else of :func:`find_config`)."""
    table, where = cfg.require_table(SECTION, path, start=start)
    return parse_config(table, where.path, table_key=where.prefix)


def parse_config(
    table: Any, path: Path | None = None, *, table_key: str | None = None
) -> GatewayConfig:
    """Check one gateway table (as parsed from TOML) and build the configuration.

    ``table_key`` names the table in messages (default: by the file's name)."""
    w = SECTION.where(path, table_key)
    if not isinstance(table, Mapping):
        w.fail(w.prefix, "a table", table)
    cfg.only_known(w, w.prefix, table, _SETTINGS)
    keys = _keys(w, w.key("keys"), table.get("keys", {}))
    auth = table.get("auth", "keys")
    if auth not in ("keys", "none"):
        w.fail(w.key("auth"), '"keys" or "none"', auth)
    if auth == "keys" and not keys:
        w.fail(w.key("keys"), 'at least one gateway key (or auth = "none")', None, said="none")
    max_body = cfg.count(w, w.key("max_body_bytes"), table.get("max_body_bytes", MAX_BODY_BYTES))
    budget = cfg.count(
        w, w.key("body_budget_bytes"), table.get("body_budget_bytes", BODY_BUDGET_BYTES)
    )
    if budget < max_body:
        # else a body under the cap could never be admitted, even alone
        w.fail(w.key("body_budget_bytes"), f"at least max_body_bytes ({max_body})", budget)
    connections = table.get("max_connections")
    return GatewayConfig(
        models=_models(w, w.key("models"), table.get("models", {})),
        passthrough=_providers_list(w, w.key("passthrough"), table.get("passthrough", [])),
        providers=_provider_settings(w, w.key("providers"), table.get("providers", {})),
        keys=keys,
        auth="none" if auth == "none" else "keys",
        session_prefix=cfg.text(
            w, w.key("session_prefix"), table.get("session_prefix", DEFAULT_PREFIX)
        ),
        rate_limit=_rate(w, table.get("rate_limit")),
        trusted_proxies=_proxies(w, table.get("trusted_proxies", "")),
        response_cache=cfg.flag(w, w.key("response_cache"), table.get("response_cache", False)),
        cache_ttl_s=cfg.seconds(w, w.key("cache_ttl_s"), table.get("cache_ttl_s", 300)),
        budgets=cfg.flag(w, w.key("budgets"), table.get("budgets", False)),
        otlp=cfg.flag(w, w.key("otlp"), table.get("otlp", False)),
        redis_url=cfg.optional_text(w, w.key("redis_url"), table.get("redis_url")),
        default_retry_after_s=cfg.seconds(
            w, w.key("default_retry_after_s"), table.get("default_retry_after_s", 1)
        ),
        timeout_s=cfg.seconds(w, w.key("timeout_s"), table.get("timeout_s", 600)),
        max_body_bytes=max_body,
        body_budget_bytes=budget,
        header_timeout_s=cfg.seconds(
            w, w.key("header_timeout_s"), table.get("header_timeout_s", 10)
        ),
        body_idle_timeout_s=cfg.seconds(
            w, w.key("body_idle_timeout_s"), table.get("body_idle_timeout_s", 30)
        ),
        max_connections=None
        if connections is None
        else cfg.count(w, w.key("max_connections"), connections),
        source=path,
    )


def _rate(w: cfg.Where, value: Any) -> tuple[int, float] | None:
    if value is None:
        return None
    try:
        return parse_rate(cfg.text(w, w.key("rate_limit"), value))
    except GatewayConfigurationError:
        raise
    except ConfigurationError:
        w.fail(w.key("rate_limit"), "N/W[s|m|h], e.g. 600/1m", value)


def _proxies(w: cfg.Where, value: Any) -> str:
    proxies = cfg.text(w, w.key("trusted_proxies"), value, empty=True)
    try:
        ClientIdentity.from_spec(proxies)
    except ConfigurationError:
        w.fail(w.key("trusted_proxies"), "a hop count or comma-separated networks", proxies)
    return proxies


def _routable(w: cfg.Where, key: str, name: Any) -> str:
    if not isinstance(name, str) or name not in PROVIDERS:
        w.fail(key, f"a provider name ({', '.join(PROVIDERS)})", name)
    if wire_of(name) is None:
        w.fail(key, "a provider speaking chat completions or Anthropic messages", name)
    return name


def _providers_list(w: cfg.Where, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        w.fail(key, "a list of provider names", value)
    return tuple(_routable(w, f"{key}[{i}]", v) for i, v in enumerate(value))


def _target(w: cfg.Where, key: str, value: Any) -> Target:
    if not isinstance(value, str) or ":" not in value:
        w.fail(key, '"provider:model", e.g. "openai:gpt-4o-mini"', value)
    provider, _, model = value.partition(":")
    if not model:
        w.fail(key, '"provider:model" with a model', value)
    return Target(_routable(w, key, provider), model)


def _models(w: cfg.Where, key: str, value: Any) -> dict[str, tuple[Target, ...]]:
    if not isinstance(value, Mapping):
        w.fail(key, "a table of public model name = [routes]", value)
    models: dict[str, tuple[Target, ...]] = {}
    for name, routes in value.items():
        where = f'{key}."{name}"'
        if isinstance(routes, str):
            routes = [routes]
        if not isinstance(routes, list) or not routes:
            w.fail(where, 'a non-empty list of "provider:model" routes', routes)
        models[name] = tuple(_target(w, f"{where}[{i}]", r) for i, r in enumerate(routes))
    return models


def _provider_settings(w: cfg.Where, key: str, value: Any) -> dict[str, ProviderSettings]:
    if not isinstance(value, Mapping):
        w.fail(key, "a table of provider tables", value)
    found: dict[str, ProviderSettings] = {}
    allowed = cfg.keys_of(ProviderSettings)
    for name, settings in value.items():
        where = f"{key}.{name}"
        _routable(w, where, name)
        if not isinstance(settings, Mapping):
            w.fail(where, "a table (base_url, api_key_env)", settings)
        for field_name in settings:
            if field_name not in allowed:
                w.fail(f"{where}.{field_name}", " or ".join(allowed), None, said="unknown key")
        found[name] = ProviderSettings(
            base_url=cfg.optional_text(w, f"{where}.base_url", settings.get("base_url")),
            api_key_env=cfg.optional_text(w, f"{where}.api_key_env", settings.get("api_key_env")),
        )
    return found


def _keys(w: cfg.Where, key: str, value: Any) -> tuple[GatewayKey, ...]:
    if not isinstance(value, Mapping):
        w.fail(key, "a table of gateway key tables", value)
    keys: list[GatewayKey] = []
    seen: set[str] = set()
    allowed = cfg.keys_of(GatewayKey)
    for name, entry in value.items():
        where = f"{key}.{name}"
        if not isinstance(entry, Mapping):
            w.fail(where, "a table (sha256, tags)", entry)
        for field_name in entry:
            if field_name not in allowed:
                w.fail(f"{where}.{field_name}", " or ".join(allowed), None, said="unknown key")
        digest = entry.get("sha256")
        if not isinstance(digest, str) or not _SHA256.match(digest.lower()):
            # Never echo the value: someone may have pasted the key itself here.
            w.fail(
                f"{where}.sha256",
                "64 hex digits (ledger gateway hash-key)",
                None,
                said="something else (value not shown)",
            )
        if digest.lower() in seen:
            w.fail(f"{where}.sha256", "a digest no other key has", None, said="a duplicate")
        seen.add(digest.lower())
        tags = entry.get("tags", {})
        if not isinstance(tags, Mapping) or not all(
            isinstance(v, str | int | float | Decimal | bool) for v in tags.values()
        ):
            w.fail(f"{where}.tags", "a table of tag = string", tags)
        keys.append(GatewayKey(name, digest.lower(), {k: str(v) for k, v in tags.items()}))
    return tuple(keys)
