"""The exceptions ledger raises, and when.

::

    LedgerError                      base of everything raised on purpose
    ├── ConfigurationError           a setting or URL cannot be used as given
    │   ├── ProviderConfigurationError   a provider is misdeclared or lacks a key/URL
    │   ├── SettingError                 a configuration key or variable is invalid (ledger.config:
    │   │   │                            file, key, what was expected)
    │   │   ├── BudgetConfigurationError     a budgets table is invalid
    │   │   ├── PriceConfigurationError      a price-override table is invalid
    │   │   └── GatewayConfigurationError    a gateway table is invalid
    │   ├── BadRetention                 a retention period cannot be used (ledger.store.retention)
    │   └── AddressUnavailable           a server's --host/--port cannot be bound (taken, not ours)
    ├── DatabaseError                the ledger database cannot serve a command
    │   ├── LedgerMissing            the SQLite ledger file does not exist (never created)
    │   ├── DatabaseUnreachable      connecting failed (down, wrong host, bad credentials)
    │   ├── SchemaOutOfDate          the schema is not at the code's Alembic head
    │   └── AnalyticsBusy            another process holds the analytics file (analytics.local)
    ├── InstrumentationError         strict metering could not parse or record an attempt
    ├── JournalError                 the journal cannot be created or written (also an OSError)
    ├── ReadOnlyQuery                ad hoc SQL would change the analytics copy: refused
    ├── PolicyError                  a routing policy cannot be started or stopped as asked
    ├── LakeTargetError              a lake target is a file, or cannot be written
    │   └── LakeEmpty                a lake target holds no exported rows (nothing to derive)
    ├── TooManyRequests              our rate limiter refused a client (HTTP 429, retry_after)
    ├── AllProvidersFailed           every route of a cascade failed (HTTP 503, retry_after)
    ├── BudgetExceeded               the budget guard refused a call before sending it
    ├── ReconcileError               a provider's billing endpoint could not be read
    │   ├── ReconcileAuthError       it refused our key (401/403): the run stops
    │   ├── WrongGeneration          OpenRouter answered another generation's stats: not stored
    │   ├── ResponseTooLarge         a billing response above its size cap: refused unread
    │   └── ReconcileDeadline        the run's --deadline passed before the bill was read
    └── ProviderError                one LLM attempt failed (error_type, transient, http_status)
        ├── ProviderHTTPError        the provider answered with a non-2xx status
        │   ├── RateLimited          429: transient, carries retry_after
        │   ├── ProviderServerError  5xx (529 overloaded included): transient
        │   └── ProviderClientError  any other 4xx (bad request, bad key): not transient
        ├── ProviderTransportError   no HTTP answer: connect/reset/protocol failure: transient
        │   └── ProviderTimeout      the attempt timed out: transient
        ├── MalformedResponse        a 2xx whose body is not a usable response: transient
        └── StreamInterrupted        an in-band error ended a stream (error_type stream_interrupted)

Every :class:`ProviderError` is classified here, once: :func:`classify_status`
maps an HTTP status to an ``error_type`` and whether retrying on another
provider can help (429, 5xx and transport failures can; other 4xx must not
burn the next provider's quota), and :func:`map_transport_errors` turns httpx's
exceptions into ours. The cascade reads ``error_type``/``transient``/
``retry_after`` and never inspects a status or an httpx class itself.

``UsageEvent`` validation raises plain ``ValueError`` at the caller: a bad event
is the caller's bug, and ``ValueError`` is what Python code expects for it.
The recording path itself never raises into an LLM call.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final, Literal

import httpx

if TYPE_CHECKING:
    from ledger.events import UsageEvent


class LedgerError(Exception):
    """Base class of every error ledger raises on purpose."""


class ConfigurationError(LedgerError):
    """A setting (environment variable, URL, option) cannot be used as given."""


class AddressUnavailable(ConfigurationError):
    """A server (``ledger simulate``, ``gateway``, ``otlp``, ``dashboard``) cannot listen
    on the address it was given: the port is taken, privileged, or the host is not one
    of this machine's. Raised before anything is printed or served; ``host`` and ``port``
    are as given."""

    def __init__(self, message: str, *, host: str, port: int) -> None:
        super().__init__(message)
        self.host = host
        self.port = port


class DatabaseError(LedgerError):
    """The ledger database cannot serve the command that was asked of it."""


class LedgerMissing(DatabaseError):
    """The SQLite ledger file does not exist: nothing was ever recorded or migrated.

    Raised instead of connecting, which would create an empty file (and its
    directories) where a read command should create nothing.
    """

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class LakeTargetError(LedgerError):
    """A lake target (``ledger export TARGET``, ``ledger lake derive TARGET``) is a file,
    or a lake cannot be written there. ``target`` is as given."""

    def __init__(self, message: str, *, target: str) -> None:
        super().__init__(message)
        self.target = target


class LakeEmpty(LakeTargetError):
    """A lake target (``ledger lake derive TARGET``) holds no exported rows: it does not
    exist, or no ``ledger export`` committed anything there."""


class ReadOnlyQuery(LedgerError):
    """Ad hoc SQL asked to change the analytics copy (DELETE, UPDATE, CREATE, SET…).

    The copy is the ledger's rows and the aggregates kept from them; sync only
    ever appends, so an edit would never be undone and every view would
    disagree with the ledger. ``statement`` is the refused statement's kind.
    """

    def __init__(self, message: str, *, statement: str) -> None:
        super().__init__(message)
        self.statement = statement


class PolicyError(LedgerError):
    """A routing policy (``ledger policy``) cannot be started or stopped as asked: an
    invalid provider object or holdout share, a model with an active policy already,
    or none to stop."""


class DatabaseUnreachable(DatabaseError):
    """Connecting to the database failed; the message names the URL (password hidden)."""

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message)
        self.url = url


class SchemaOutOfDate(DatabaseError):
    """The database's schema revision is not the code's; ``ledger db upgrade`` fixes it.

    ``current`` is None when there is no ledger schema at all; ``where`` is the
    database's URL (password hidden).
    """

    def __init__(self, message: str, *, current: str | None, head: str, where: str = "") -> None:
        super().__init__(message)
        self.current = current
        self.head = head
        self.where = where


class JournalError(LedgerError, OSError):
    """The journal cannot be created or written, so an event cannot be made durable.

    Raised by ``Ledger()`` when no journal segment can be created, and by
    ``record()`` for an event it did not keep: with ``on_journal_full="refuse"``
    at the first event the journal's disk refuses, otherwise once
    ``max_pending_rows`` events already wait in memory. Also an ``OSError``,
    since a disk is what failed.
    """


class ProviderConfigurationError(ConfigurationError):
    """A provider cannot be built as given: a capability declared without its hook,
    a missing API key or base URL, an unknown provider name."""


AttemptErrorType = Literal[
    "rate_limited", "server_error", "transport", "timeout", "client_error", "stream_interrupted"
]


class ProviderError(LedgerError):
    """One attempt at one provider failed; raised after the attempt's row was recorded.

    ``error_type`` is the ledger's ``error_type`` column; ``transient`` says
    whether the same request may succeed elsewhere or later (the cascade's
    test). ``retry_after`` is the provider's hint in seconds, when it gave one.
    ``event`` is the usage row recorded for the attempt (None until recorded).
    ``upstream`` is who failed behind an aggregator, when the error named it.
    The message never contains an API key or prompt/response text.
    """

    error_type: AttemptErrorType = "server_error"
    transient: bool = True

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        http_status: int | None = None,
        retry_after: float | None = None,
        code: str | None = None,
        upstream: str | None = None,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.http_status = http_status
        self.retry_after = retry_after
        self.code = code
        self.upstream = upstream
        self.event: UsageEvent | None = None


class ProviderHTTPError(ProviderError):
    """The provider answered with a non-2xx HTTP status."""


class RateLimited(ProviderHTTPError):
    """HTTP 429: too many requests or tokens; ``retry_after`` says when to come back."""

    error_type: AttemptErrorType = "rate_limited"
    transient = True


class ProviderServerError(ProviderHTTPError):
    """HTTP 5xx, including Anthropic's 529 ``overloaded_error``."""

    error_type: AttemptErrorType = "server_error"
    transient = True


class ProviderClientError(ProviderHTTPError):
    """Any other 4xx (400 malformed, 401 bad key, 404 unknown model): retrying elsewhere
    would only burn the next provider's quota."""

    error_type: AttemptErrorType = "client_error"
    transient = False


class ProviderTransportError(ProviderError):
    """No HTTP answer at all: the connection failed, was reset or broke the protocol."""

    error_type: AttemptErrorType = "transport"
    transient = True


class ProviderTimeout(ProviderTransportError):
    """The attempt exceeded its connect, read, write or pool timeout."""

    error_type: AttemptErrorType = "timeout"


class MalformedResponse(ProviderError):
    """A 2xx answer whose body is not a usable response (not JSON, truncated, wrong shape)."""

    error_type: AttemptErrorType = "server_error"
    transient = True


class StreamInterrupted(ProviderError):
    """A stream ended with an in-band error (or broke) after it had started.

    ``transient`` follows the in-band code (429/5xx-like codes are transient);
    ``delivered`` says whether text already reached the caller, in which case
    a fallback would repeat it.
    """

    error_type: AttemptErrorType = "stream_interrupted"

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        http_status: int | None = None,
        retry_after: float | None = None,
        code: str | None = None,
        transient: bool = True,
        delivered: bool = False,
    ) -> None:
        super().__init__(
            message, provider=provider, http_status=http_status, retry_after=retry_after, code=code
        )
        self.transient = transient
        self.delivered = delivered


def classify_status(status: int) -> tuple[AttemptErrorType, bool]:
    """``(error_type, transient)`` for a non-2xx HTTP status (ADR-0014's classifier)."""
    if status == 429:
        return "rate_limited", True
    if status >= 500:
        return "server_error", True
    return "client_error", False


_STATUS_CLASSES: Final[dict[str, type[ProviderHTTPError]]] = {
    "rate_limited": RateLimited,
    "server_error": ProviderServerError,
    "client_error": ProviderClientError,
}


def http_error(
    status: int,
    message: str,
    *,
    provider: str,
    retry_after: float | None = None,
    code: str | None = None,
    upstream: str | None = None,
) -> ProviderHTTPError:
    """The exception for a non-2xx answer, its class chosen by :func:`classify_status`."""
    error_type, _ = classify_status(status)
    cls = _STATUS_CLASSES[error_type]
    return cls(
        f"{provider} answered HTTP {status}: {message}",
        provider=provider,
        http_status=status,
        retry_after=retry_after,
        code=code,
        upstream=upstream,
    )


def is_transient_code(code: Any) -> bool:
    """Whether an in-band error code (numeric status or a provider's word) is transient."""
    if isinstance(code, int) and not isinstance(code, bool):
        return code == 429 or code >= 500
    if isinstance(code, str):
        if code.isdigit():
            return is_transient_code(int(code))
        word = code.lower()
        return any(w in word for w in ("rate", "overload", "server", "unavailable", "timeout"))
    return True


_MAX_RETRY_AFTER: Final = 86_400.0


def _seconds(value: Any, scale: float = 1.0) -> float | None:
    try:
        seconds = float(value) * scale
    except (TypeError, ValueError):
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, _MAX_RETRY_AFTER)


def parse_retry_after(headers: Mapping[str, str], now: dt.datetime | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (OpenAI) or ``retry-after`` (seconds or
    an HTTP date); None when absent or unreadable."""
    lower = {k.lower(): v for k, v in headers.items()}
    if (ms := lower.get("retry-after-ms")) is not None and (s := _seconds(ms, 0.001)) is not None:
        return s
    raw = lower.get("retry-after")
    if raw is None:
        return None
    if (s := _seconds(raw)) is not None:
        return s
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return _seconds(max(0.0, (when - (now or dt.datetime.now(dt.UTC))).total_seconds()))


# Shapes of provider API keys, redacted from any text we raise or log in case a
# provider echoes one back (OpenAI's 401 does, partially masked).
_KEY_PATTERN: Final = re.compile(r"\b(?:sk-|gsk_|AIza)[A-Za-z0-9_\-]{12,}")


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` with the given secrets and anything shaped like an API key masked."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return _KEY_PATTERN.sub("***", text)


def map_transport_errors(provider: str) -> TransportErrorMap:
    """Turn httpx's request-level exceptions into :class:`ProviderTransportError`/
    :class:`ProviderTimeout`; the one place the client maps foreign exceptions."""
    return TransportErrorMap(provider)


class TransportErrorMap:
    """The context manager :func:`map_transport_errors` returns.

    A class, not a ``@contextmanager`` generator: a stream enters it once per chunk
    read, and a generator-based one costs several times more to enter and leave."""

    __slots__ = ("provider",)

    def __init__(self, provider: str) -> None:
        self.provider = provider

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, httpx.RequestError):
            raise self.error_for(exc) from exc

    def error_for(self, exc: httpx.RequestError) -> ProviderError:
        """Our error for httpx's ``exc`` (what leaving the ``with`` block raises); for a
        loop that catches ``httpx.RequestError`` itself rather than enter this per item."""
        provider = self.provider
        if isinstance(exc, httpx.TimeoutException):
            return ProviderTimeout(
                f"{provider}: timed out ({type(exc).__name__})", provider=provider
            )
        return ProviderTransportError(
            f"{provider}: transport failure ({type(exc).__name__})", provider=provider
        )


class TooManyRequests(LedgerError):
    """Raised when *our* rate limiter refuses an incoming request (not a provider's 429).

    ``retry_after`` is the seconds until the client's next request would be
    accepted; the resilience middleware answers it with HTTP 429 and
    ``Retry-After``.
    """

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


#: An HTTP answer as the ASGI layer sends it: status, headers, body.
HTTPResponse = tuple[int, list[tuple[bytes, bytes]], bytes]


def retry_after_header(seconds: float | None) -> str:
    """``Retry-After`` as RFC 9110 delay-seconds: a whole number, rounded up, at least 1."""
    return str(max(1, math.ceil(seconds or 0)))


def error_response(status: int, code: str, message: str, retry_after: float | None) -> HTTPResponse:
    """A short JSON error answer with ``Retry-After`` (when given); never a stack trace."""
    body: dict[str, Any] = {"error": code, "message": message}
    headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
    if retry_after is not None:
        header = retry_after_header(retry_after)
        body["retry_after"] = int(header)
        headers.append((b"retry-after", header.encode()))
    return status, headers, json.dumps(body, ensure_ascii=False).encode()


# The 503 a service answers when every provider failed, by language (BCP 47
# primary subtag). English is the fallback for any other locale.
_UNAVAILABLE: Final[dict[str, str]] = {
    "en": "All AI providers are busy right now. Please try again in {seconds} seconds.",
    "pt": "Todos os provedores de IA estão ocupados no momento. "
    "Tente novamente em {seconds} segundos.",
    "es": "Todos los proveedores de IA están ocupados en este momento. "
    "Inténtalo de nuevo en {seconds} segundos.",
}


class AllProvidersFailed(LedgerError):
    """Every route of a fallback cascade failed with a transient error.

    ``errors`` holds each attempt's :class:`ProviderError` in order (each with
    its recorded row in ``.event``); ``retry_after`` is the largest hint any
    provider gave, else the cascade's default. :meth:`http_response` is the
    friendly, retryable 503 a service should answer with.
    """

    def __init__(
        self,
        errors: tuple[ProviderError, ...],
        *,
        retry_after: float,
        call_id: str,
        locale: str | None = None,
    ) -> None:
        summary = "; ".join(f"{e.provider}: {e.error_type}" for e in errors) or "no route tried"
        super().__init__(f"all {len(errors)} attempt(s) failed ({summary})")
        self.errors = errors
        self.retry_after = retry_after
        self.call_id = call_id
        self.locale = locale

    def http_response(self, locale: str | None = None) -> HTTPResponse:
        """HTTP 503 with ``Retry-After`` and a one-line JSON message in the caller's language."""
        language = (locale or self.locale or "en").split("-")[0].split("_")[0].lower()
        template = _UNAVAILABLE.get(language, _UNAVAILABLE["en"])
        seconds = retry_after_header(self.retry_after)
        message = template.format(seconds=seconds)
        return error_response(503, "providers_unavailable", message, self.retry_after)


class SettingError(ConfigurationError):
    """A configuration key (in ``ledger.toml``, ``pyproject.toml`` or a file named by a
    variable) or an environment variable cannot be used: bad TOML, an unknown key, a
    value of the wrong kind. Raised by :mod:`ledger.config`, the one reader.

    ``path`` is the file (``<environment>`` for a variable), ``key`` the dotted key (or
    the variable) at fault, ``expected`` what it should hold: the fix.
    """

    def __init__(self, message: str, *, path: str, key: str, expected: str) -> None:
        super().__init__(message)
        self.path = path
        self.key = key
        self.expected = expected


class BudgetConfigurationError(SettingError):
    """A budgets table (``[tool.ledger.budgets]`` in pyproject.toml, ``[budgets]`` in
    ledger.toml) cannot be used: bad TOML, an unknown key, a limit that is not a
    number >= 0, an agent the configuration or the ledger does not know."""


class PriceConfigurationError(SettingError):
    """A price-override table (``[[tool.ledger.prices]]`` in pyproject.toml,
    ``[[prices]]`` in ledger.toml) cannot be used: bad TOML, an unknown key, a
    rate that is not a number >= 0, a bad date or hour window, two overrides for
    the same provider, model, date and hours."""


class GatewayConfigurationError(SettingError):
    """The gateway table (``[tool.ledger.gateway]``, ``[gateway]``) cannot be used: an
    unknown key, a route to a provider the gateway cannot speak to, no gateway key
    without ``auth = "none"``, a limit that is not positive."""


class BudgetExceeded(LedgerError):
    """Raised by the client *before* sending a call that could take a budget past its limit.

    Nothing was sent and no row recorded. ``budget`` is the budget's name,
    ``subject`` what it was counting (an agent, a model, a call id),
    ``window`` the UTC day (ISO date) or the call it counts over,
    ``spent_usd`` the spend so far in that window, ``estimate_usd`` the call's
    worst-case cost and ``limit_usd`` the limit.
    """

    def __init__(
        self,
        message: str,
        *,
        budget: str,
        subject: str,
        window: str,
        spent_usd: Decimal,
        estimate_usd: Decimal,
        limit_usd: Decimal,
    ) -> None:
        super().__init__(message)
        self.budget = budget
        self.subject = subject
        self.window = window
        self.spent_usd = spent_usd
        self.estimate_usd = estimate_usd
        self.limit_usd = limit_usd


class ReconcileError(LedgerError):
    """``ledger reconcile`` could not get what the bill says (the endpoint kept failing,
    or answered something that is not a bill). Rows not yet reconciled stay so."""


class ReconcileAuthError(ReconcileError):
    """The billing endpoint refused the key (401/403): nothing more is fetched."""


class WrongGeneration(ReconcileError):
    """OpenRouter's answer for one generation id names another generation (or none).

    Its ``total_cost`` is someone else's bill: the row is counted as failed and left
    unreconciled, never billed with it (a billed row is not fetched again by a plain run).
    """


class ResponseTooLarge(ReconcileError):
    """A billing response's body is above its cap: the rest is not read, nothing is parsed.

    The cap bounds a run's memory (a parsed JSON page takes about five times its size).
    """


class ReconcileDeadline(ReconcileError):
    """The run's overall deadline (``--deadline``) passed before the bill was read."""
