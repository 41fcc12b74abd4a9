"""The gateway's configuration: ``[tool.ledger.gateway]`` in pyproject.toml or
``[gateway]`` in ledger.toml, checked with errors naming the file, key and what was expected.

Where (first found wins, as for budgets): an explicit path, the file named by
``LEDGER_GATEWAY_FILE``, else the nearest ``ledger.toml`` (table ``[gateway]``)
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

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, NoReturn

from ledger.errors import ConfigurationError
from ledger.gateway.intake import BODY_BUDGET_BYTES, MAX_BODY_BYTES
from ledger.providers import PROVIDERS
from ledger.resilience.config import parse_rate
from ledger.resilience.identity import ClientIdentity
from ledger.session_key import DEFAULT_PREFIX

ENV_GATEWAY_FILE: Final = "LEDGER_GATEWAY_FILE"
LEDGER_TOML: Final = "ledger.toml"
PYPROJECT: Final = "pyproject.toml"

#: The two wire formats the gateway speaks: OpenAI chat completions, Anthropic messages.
Wire = Literal["chat", "messages"]

_SETTINGS: Final = (
    "auth",
    "passthrough",
    "session_prefix",
    "rate_limit",
    "trusted_proxies",
    "response_cache",
    "cache_ttl_s",
    "budgets",
    "redis_url",
    "otlp",
    "default_retry_after_s",
    "timeout_s",
    "max_body_bytes",
    "body_budget_bytes",
    "header_timeout_s",
    "body_idle_timeout_s",
    "max_connections",
    "models",
    "providers",
    "keys",
)
_SHA256: Final = re.compile(r"^[0-9a-f]{64}$")


class GatewayConfigurationError(ConfigurationError):
    """The gateway configuration cannot be used: ``path`` is the file, ``key`` the dotted
    key at fault, ``expected`` what it should hold."""

    def __init__(self, message: str, *, path: str, key: str, expected: str) -> None:
        super().__init__(message)
        self.path = path
        self.key = key
        self.expected = expected


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

    base_url: str | None = None
    api_key_env: str | None = None


@dataclass(frozen=True, slots=True)
class GatewayKey:
    """A gateway key as stored: its name, the SHA-256 hex of the secret, its row tags."""

    name: str
    sha256: str
    tags: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class GatewayConfig:
    """Everything the gateway is told; see the module docstring."""

    models: Mapping[str, tuple[Target, ...]] = field(default_factory=dict)
    passthrough: tuple[str, ...] = ()
    providers: Mapping[str, ProviderSettings] = field(default_factory=dict)
    keys: tuple[GatewayKey, ...] = ()
    auth: Literal["keys", "none"] = "keys"
    session_prefix: str = DEFAULT_PREFIX
    rate_limit: tuple[int, float] | None = None
    trusted_proxies: str = ""
    response_cache: bool = False
    cache_ttl_s: float = 300.0
    budgets: bool = False
    redis_url: str | None = None
    #: Serve the OTLP/HTTP trace receiver (:mod:`ledger.otel.receiver`) on ``/v1/traces``.
    otlp: bool = False
    #: ``Retry-After`` when every route failed and none said when to come back: short, so
    #: an SDK's default retries (2) end within seconds, as against the provider itself.
    default_retry_after_s: float = 1.0
    timeout_s: float = 600.0
    #: A request body larger than this is refused (413) before it is read.
    max_body_bytes: int = MAX_BODY_BYTES
    #: The bytes of request bodies in flight at once (:mod:`ledger.gateway.intake`).
    body_budget_bytes: int = BODY_BUDGET_BYTES
    #: Seconds a connection has to send a whole request head, from its first byte (or
    #: from the connection's start); then it is closed.
    header_timeout_s: float = 10.0
    #: Seconds a request body may go without a byte before it is answered 408.
    body_idle_timeout_s: float = 30.0
    #: Connections (or requests) at once before uvicorn answers 503 (None: no limit).
    max_connections: int | None = None
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


# -- reading ------------------------------------------------------------------------------


def _prefix(path: Path | None) -> str:
    return "gateway" if path is not None and path.name == LEDGER_TOML else "tool.ledger.gateway"


def _fail(
    path: Path | None, key: str, expected: str, got: Any, *, said: str | None = None
) -> NoReturn:
    where = str(path) if path is not None else "<gateway>"
    raise GatewayConfigurationError(
        f"{where}: {key}: expected {expected}, got {said or repr(got)}",
        path=where,
        key=key,
        expected=expected,
    )


def _table(path: Path, document: Mapping[str, Any]) -> Any:
    if path.name == LEDGER_TOML:
        return document.get("gateway")
    return document.get("tool", {}).get("ledger", {}).get("gateway")


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        _fail(path, "(file)", "a readable TOML file", None, said=str(exc.strerror))
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        _fail(path, "(file)", "valid TOML", None, said=f"a syntax error ({exc})")


def find_config(start: Path | None = None) -> Path | None:
    """The gateway configuration file that applies from ``start`` (default: the cwd)."""
    if env := os.environ.get(ENV_GATEWAY_FILE):
        return Path(env)
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        for name in (LEDGER_TOML, PYPROJECT):
            candidate = directory / name
            if candidate.is_file():
                try:
                    document = tomllib.loads(candidate.read_text("utf-8"))
                except (OSError, tomllib.TOMLDecodeError):
                    return candidate  # load_config says what is wrong with it
                if _table(candidate, document) is not None:
                    return candidate
    return None


def load_config(path: Path | None = None, *, start: Path | None = None) -> GatewayConfig:
    """Read and check the gateway table of ``path`` (else of :func:`find_config`)."""
    chosen = path if path is not None else find_config(start)
    if chosen is None:
        _fail(
            None,
            "tool.ledger.gateway",
            f"a [tool.ledger.gateway] table in {PYPROJECT} or [gateway] in {LEDGER_TOML} "
            f"(or a file named by {ENV_GATEWAY_FILE})",
            None,
            said="no gateway configuration",
        )
    table = _table(chosen, _read(chosen))
    if table is None:
        _fail(chosen, _prefix(chosen), "a table", None, said="no such table")
    return parse_config(table, chosen)


def parse_config(table: Any, path: Path | None = None) -> GatewayConfig:
    """Check one gateway table (as parsed from TOML) and build the configuration."""
    p = _prefix(path)
    if not isinstance(table, Mapping):
        _fail(path, p, "a table", table)
    for name in table:
        if name not in _SETTINGS:
            _fail(path, f"{p}.{name}", f"one of {', '.join(_SETTINGS)}", None, said="unknown key")
    passthrough = _providers_list(path, f"{p}.passthrough", table.get("passthrough", []))
    models = _models(path, f"{p}.models", table.get("models", {}))
    keys = _keys(path, f"{p}.keys", table.get("keys", {}))
    auth = table.get("auth", "keys")
    if auth not in ("keys", "none"):
        _fail(path, f"{p}.auth", '"keys" or "none"', auth)
    if auth == "keys" and not keys:
        _fail(path, f"{p}.keys", 'at least one gateway key (or auth = "none")', None, said="none")
    rate = table.get("rate_limit")
    if rate is not None:
        try:
            rate = parse_rate(_text(path, f"{p}.rate_limit", rate))
        except ConfigurationError:
            _fail(path, f"{p}.rate_limit", "N/W[s|m|h], e.g. 600/1m", rate)
    proxies = _text(path, f"{p}.trusted_proxies", table.get("trusted_proxies", ""), empty=True)
    try:
        ClientIdentity.from_spec(proxies)
    except ConfigurationError:
        _fail(path, f"{p}.trusted_proxies", "a hop count or comma-separated networks", proxies)
    max_body = _count(path, f"{p}.max_body_bytes", table.get("max_body_bytes", MAX_BODY_BYTES))
    budget = _count(
        path, f"{p}.body_budget_bytes", table.get("body_budget_bytes", BODY_BUDGET_BYTES)
    )
    if budget < max_body:
        # else a body under the cap could never be admitted, even alone
        _fail(path, f"{p}.body_budget_bytes", f"at least max_body_bytes ({max_body})", budget)
    connections = table.get("max_connections")
    if connections is not None:
        connections = _count(path, f"{p}.max_connections", connections)
    return GatewayConfig(
        models=models,
        passthrough=passthrough,
        providers=_provider_settings(path, f"{p}.providers", table.get("providers", {})),
        keys=keys,
        auth="none" if auth == "none" else "keys",
        session_prefix=_text(
            path, f"{p}.session_prefix", table.get("session_prefix", DEFAULT_PREFIX)
        ),
        rate_limit=rate,
        trusted_proxies=proxies,
        response_cache=_flag(path, f"{p}.response_cache", table.get("response_cache", False)),
        cache_ttl_s=_positive(path, f"{p}.cache_ttl_s", table.get("cache_ttl_s", 300)),
        budgets=_flag(path, f"{p}.budgets", table.get("budgets", False)),
        otlp=_flag(path, f"{p}.otlp", table.get("otlp", False)),
        redis_url=_optional_text(path, f"{p}.redis_url", table.get("redis_url")),
        default_retry_after_s=_positive(
            path, f"{p}.default_retry_after_s", table.get("default_retry_after_s", 1)
        ),
        timeout_s=_positive(path, f"{p}.timeout_s", table.get("timeout_s", 600)),
        max_body_bytes=max_body,
        body_budget_bytes=budget,
        header_timeout_s=_positive(
            path, f"{p}.header_timeout_s", table.get("header_timeout_s", 10)
        ),
        body_idle_timeout_s=_positive(
            path, f"{p}.body_idle_timeout_s", table.get("body_idle_timeout_s", 30)
        ),
        max_connections=connections,
        source=path,
    )


def _text(path: Path | None, key: str, value: Any, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty):
        _fail(path, key, "a string" if empty else "a non-empty string", value)
    return value


def _optional_text(path: Path | None, key: str, value: Any) -> str | None:
    return None if value is None else _text(path, key, value)


def _flag(path: Path | None, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        _fail(path, key, "true or false", value)
    return value


def _positive(path: Path | None, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        _fail(path, key, "a positive number of seconds", value)
    return float(value)


def _count(path: Path | None, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        _fail(path, key, "a positive whole number", value)
    return value


def _routable(path: Path | None, key: str, name: Any) -> str:
    if not isinstance(name, str) or name not in PROVIDERS:
        _fail(path, key, f"a provider name ({', '.join(PROVIDERS)})", name)
    if wire_of(name) is None:
        _fail(path, key, "a provider speaking chat completions or Anthropic messages", name)
    return name


def _providers_list(path: Path | None, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        _fail(path, key, "a list of provider names", value)
    return tuple(_routable(path, f"{key}[{i}]", v) for i, v in enumerate(value))


def _target(path: Path | None, key: str, value: Any) -> Target:
    if not isinstance(value, str) or ":" not in value:
        _fail(path, key, '"provider:model", e.g. "openai:gpt-4o-mini"', value)
    provider, _, model = value.partition(":")
    if not model:
        _fail(path, key, '"provider:model" with a model', value)
    return Target(_routable(path, key, provider), model)


def _models(path: Path | None, key: str, value: Any) -> dict[str, tuple[Target, ...]]:
    if not isinstance(value, Mapping):
        _fail(path, key, "a table of public model name = [routes]", value)
    models: dict[str, tuple[Target, ...]] = {}
    for name, routes in value.items():
        where = f'{key}."{name}"'
        if isinstance(routes, str):
            routes = [routes]
        if not isinstance(routes, list) or not routes:
            _fail(path, where, 'a non-empty list of "provider:model" routes', routes)
        models[name] = tuple(_target(path, f"{where}[{i}]", r) for i, r in enumerate(routes))
    return models


def _provider_settings(path: Path | None, key: str, value: Any) -> dict[str, ProviderSettings]:
    if not isinstance(value, Mapping):
        _fail(path, key, "a table of provider tables", value)
    found: dict[str, ProviderSettings] = {}
    for name, settings in value.items():
        where = f"{key}.{name}"
        _routable(path, where, name)
        if not isinstance(settings, Mapping):
            _fail(path, where, "a table (base_url, api_key_env)", settings)
        for field_name in settings:
            if field_name not in ("base_url", "api_key_env"):
                _fail(
                    path,
                    f"{where}.{field_name}",
                    "base_url or api_key_env",
                    None,
                    said="unknown key",
                )
        found[name] = ProviderSettings(
            base_url=_optional_text(path, f"{where}.base_url", settings.get("base_url")),
            api_key_env=_optional_text(path, f"{where}.api_key_env", settings.get("api_key_env")),
        )
    return found


def _keys(path: Path | None, key: str, value: Any) -> tuple[GatewayKey, ...]:
    if not isinstance(value, Mapping):
        _fail(path, key, "a table of gateway key tables", value)
    keys: list[GatewayKey] = []
    seen: set[str] = set()
    for name, entry in value.items():
        where = f"{key}.{name}"
        if not isinstance(entry, Mapping):
            _fail(path, where, "a table (sha256, tags)", entry)
        for field_name in entry:
            if field_name not in ("sha256", "tags"):
                _fail(path, f"{where}.{field_name}", "sha256 or tags", None, said="unknown key")
        digest = entry.get("sha256")
        if not isinstance(digest, str) or not _SHA256.match(digest.lower()):
            # Never echo the value: someone may have pasted the key itself here.
            _fail(
                path,
                f"{where}.sha256",
                "64 hex digits (ledger gateway hash-key)",
                None,
                said="something else (value not shown)",
            )
        if digest.lower() in seen:
            _fail(path, f"{where}.sha256", "a digest no other key has", None, said="a duplicate")
        seen.add(digest.lower())
        tags = entry.get("tags", {})
        if not isinstance(tags, Mapping) or not all(
            isinstance(v, str | int | float | bool) for v in tags.values()
        ):
            _fail(path, f"{where}.tags", "a table of tag = string", tags)
        keys.append(GatewayKey(name, digest.lower(), {k: str(v) for k, v in tags.items()}))
    return tuple(keys)
