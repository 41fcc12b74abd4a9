"""Price overrides: your own per-million rates, used instead of genai-prices.

Where (first found wins, never merged)::

    1. an explicit path (``ledger reprice --prices FILE``, ``load_prices(path=…)``)
    2. the file named by ``LEDGER_PRICES_FILE``
    3. the nearest directory, from the working directory upwards, holding
       ``ledger.toml`` with ``[[prices]]`` or a ``pyproject.toml`` with
       ``[[tool.ledger.prices]]``; when one directory holds both, ``ledger.toml``
       wins.

What (USD per million tokens, read exactly: TOML floats become ``Decimal``)::

    [[tool.ledger.prices]]              # in ledger.toml: [[prices]]
    provider = "mistral"                # the ledger's provider name (the row's provider)
    model = "mistral-large-latest"      # the model that served the call (the row's model)
    effective_from = 2025-12-02         # a UTC date; the latest one on or before the call wins
    input = 0.5                         # required
    output = 1.5                        # required
    cache_read = 0.05                   # optional, as are the rest
    cache_write = 3.75                  # 5-minute cache writes
    cache_write_1h = 6.0                # 1-hour cache writes
    reasoning = 1.5                     # reasoning tokens (inside output), else at output
    input_audio = 1.0
    cache_audio_read = 0.1
    output_audio = 10.0
    hours_utc = ["16:30", "00:30"]      # optional: only calls starting in this window
                                        # (e.g. DeepSeek's off-peak discount)

An override with ``hours_utc`` wins over one without, inside its window. A
component the usage needs but the override lacks (cache reads without
``cache_read``...) makes the cost ``incomplete``, as for genai-prices.
"""

from __future__ import annotations

import datetime as dt
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, NoReturn

from ledger.errors import PriceConfigurationError
from ledger.providers.base import Usage

ENV_PRICES_FILE: Final = "LEDGER_PRICES_FILE"
LEDGER_TOML: Final = "ledger.toml"
PYPROJECT: Final = "pyproject.toml"

REQUIRED_RATES: Final = ("input", "output")
OPTIONAL_RATES: Final = (
    "cache_read",
    "cache_write",
    "cache_write_1h",
    "reasoning",
    "input_audio",
    "cache_audio_read",
    "output_audio",
)
KEYS: Final = ("provider", "model", "effective_from", "hours_utc", *REQUIRED_RATES, *OPTIONAL_RATES)
_MTOK: Final = Decimal(1_000_000)


@dataclass(frozen=True, slots=True)
class PriceOverride:
    """One provider's model priced from ``effective_from`` (and within ``hours``, when set)."""

    provider: str
    model: str
    effective_from: dt.date
    input: Decimal
    output: Decimal
    cache_read: Decimal | None = None
    cache_write: Decimal | None = None
    cache_write_1h: Decimal | None = None
    reasoning: Decimal | None = None
    input_audio: Decimal | None = None
    cache_audio_read: Decimal | None = None
    output_audio: Decimal | None = None
    hours: tuple[dt.time, dt.time] | None = None

    def applies_at(self, at: dt.datetime) -> bool:
        at = at.astimezone(dt.UTC)
        if at.date() < self.effective_from:
            return False
        if self.hours is None:
            return True
        start, end, now = self.hours[0], self.hours[1], at.time()
        return start <= now < end if start <= end else now >= start or now < end

    def price(self, usage: Usage) -> tuple[Decimal, tuple[str, ...]]:
        """The USD cost of ``usage`` and the components this override had no rate for
        (priced at the input/output rate instead, so the cost is ``incomplete``)."""
        missing: list[str] = []

        def rate(value: Decimal | None, fallback: Decimal, name: str, count: int) -> Decimal:
            if value is None and count > 0:
                missing.append(name)
            return fallback if value is None else value

        read, write = usage.cache_read_tokens, usage.cache_write_tokens
        write_1h = min(usage.cache_write_1h_tokens, write)
        audio_read = min(usage.cache_audio_read_tokens, read)
        audio_in = max(usage.input_audio_tokens - audio_read, 0)
        uncached = max(usage.input_tokens - read - write - audio_in, 0)
        read_rate = rate(self.cache_read, self.input, "cache read", read - audio_read)
        write_rate = rate(self.cache_write, self.input, "cache write", write - write_1h)
        audio_out = min(usage.output_audio_tokens, usage.output_tokens)
        reasoning = min(usage.reasoning_tokens, usage.output_tokens - audio_out)
        total = (
            uncached * self.input
            + audio_in * rate(self.input_audio, self.input, "audio input", audio_in)
            + (read - audio_read) * read_rate
            + audio_read * rate(self.cache_audio_read, read_rate, "audio cache read", audio_read)
            + (write - write_1h) * write_rate
            + write_1h * rate(self.cache_write_1h, write_rate, "1-hour cache write", write_1h)
            + (usage.output_tokens - audio_out - reasoning) * self.output
            + reasoning * (self.output if self.reasoning is None else self.reasoning)
            + audio_out * rate(self.output_audio, self.output, "audio output", audio_out)
        )
        return total / _MTOK, tuple(missing)


@dataclass(frozen=True, slots=True)
class PriceBook:
    """Every override of one file (empty: genai-prices alone)."""

    overrides: tuple[PriceOverride, ...] = ()
    source: Path | None = None

    def find(self, provider: str, model: str, at: dt.datetime) -> PriceOverride | None:
        """The override for ``provider``/``model`` at ``at``: the latest effective date,
        an hour window beating none."""
        best: PriceOverride | None = None
        for o in self.overrides:
            if o.provider != provider or o.model != model or not o.applies_at(at):
                continue
            if best is None or (o.effective_from, o.hours is not None) > (
                best.effective_from,
                best.hours is not None,
            ):
                best = o
        return best


NO_OVERRIDES: Final = PriceBook()


def _fail(
    path: Path | None, key: str, expected: str, got: Any, *, said: str | None = None
) -> NoReturn:
    where = str(path) if path is not None else "<prices>"
    raise PriceConfigurationError(
        f"{where}: {key}: expected {expected}, got {said or repr(got)}",
        path=where,
        key=key,
        expected=expected,
    )


def _prefix(path: Path | None) -> str:
    return "prices" if path is not None and path.name == LEDGER_TOML else "tool.ledger.prices"


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        _fail(path, "(file)", "a readable TOML file", None, said=str(exc.strerror))
    try:
        return tomllib.loads(text, parse_float=Decimal)
    except tomllib.TOMLDecodeError as exc:
        _fail(path, "(file)", "valid TOML", None, said=f"a syntax error ({exc})")


def _prices_table(path: Path, document: Mapping[str, Any]) -> Any:
    if path.name == LEDGER_TOML:
        return document.get("prices")
    tool = document.get("tool")
    ledger = tool.get("ledger") if isinstance(tool, Mapping) else None
    return ledger.get("prices") if isinstance(ledger, Mapping) else None


def find_prices(start: Path | None = None) -> Path | None:
    """The price-override file that applies from ``start`` (default: the working directory)."""
    if env := os.environ.get(ENV_PRICES_FILE):
        return Path(env)
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        for name in (LEDGER_TOML, PYPROJECT):
            candidate = directory / name
            if not candidate.is_file():
                continue
            try:
                document = tomllib.loads(candidate.read_text("utf-8"))
            except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
                return candidate  # let load_prices say what is wrong with it
            if _prices_table(candidate, document) is not None:
                return candidate
    return None


def load_prices(path: Path | None = None, *, start: Path | None = None) -> PriceBook:
    """The overrides of ``path`` (else of :func:`find_prices`); none found → no overrides."""
    chosen = path if path is not None else find_prices(start)
    if chosen is None:
        return NO_OVERRIDES
    table = _prices_table(chosen, _read_toml(chosen))
    if table is None:
        if path is not None:
            _fail(chosen, _prefix(chosen), "an array of price tables", None, said="no such table")
        return NO_OVERRIDES
    return parse_prices(table, chosen)


def parse_prices(table: Any, path: Path | None = None) -> PriceBook:
    """Check an array of price tables (as parsed from TOML) and build the book."""
    prefix = _prefix(path)
    if not isinstance(table, list):
        _fail(path, prefix, f"an array of tables ([[{prefix}]])", table)
    overrides = [_override(path, f"{prefix}[{i}]", entry) for i, entry in enumerate(table)]
    seen: dict[tuple[Any, ...], int] = {}
    for i, o in enumerate(overrides):
        identity = (o.provider, o.model, o.effective_from, o.hours)
        if identity in seen:
            _fail(
                path,
                f"{prefix}[{i}]",
                "one override per provider, model, effective_from and hours_utc",
                None,
                said=f"the same as {prefix}[{seen[identity]}]",
            )
        seen[identity] = i
    return PriceBook(tuple(overrides), path)


def _text(path: Path | None, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        _fail(path, key, "a non-empty string", value)
    return value


def _rate(path: Path | None, key: str, value: Any) -> Decimal:
    expected = "a number of USD per million tokens >= 0"
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        _fail(path, key, expected, value)
    amount = Decimal(value)
    if not amount.is_finite() or amount < 0 or amount > 1_000_000:
        _fail(path, key, expected, value)
    return amount


def _date(path: Path | None, key: str, value: Any) -> dt.date:
    if isinstance(value, dt.datetime) or not isinstance(value, dt.date):
        _fail(path, key, "a TOML date such as 2025-12-02 (UTC)", value)
    return value


def _hours(path: Path | None, key: str, value: Any) -> tuple[dt.time, dt.time] | None:
    if value is None:
        return None
    expected = 'two "HH:MM" UTC times, start and end, e.g. ["16:30", "00:30"]'
    if not isinstance(value, list) or len(value) != 2 or not all(isinstance(v, str) for v in value):
        _fail(path, key, expected, value)
    try:
        start, end = (dt.time.fromisoformat(v) for v in value)
    except ValueError:
        _fail(path, key, expected, value)
    if start == end:
        _fail(path, key, "a window of some length (start != end)", value)
    return start, end


def _override(path: Path | None, key: str, entry: Any) -> PriceOverride:
    if not isinstance(entry, Mapping):
        _fail(path, key, "a table", entry)
    for name in entry:
        if name not in KEYS:
            _fail(path, f"{key}.{name}", f"one of {', '.join(KEYS)}", None, said="an unknown key")
    for name in ("provider", "model", "effective_from", *REQUIRED_RATES):
        if name not in entry:
            _fail(path, f"{key}.{name}", "a value (required)", None, said="nothing")
    optional = {
        name: _rate(path, f"{key}.{name}", entry[name]) for name in OPTIONAL_RATES if name in entry
    }
    return PriceOverride(
        provider=_text(path, f"{key}.provider", entry["provider"]),
        model=_text(path, f"{key}.model", entry["model"]),
        effective_from=_date(path, f"{key}.effective_from", entry["effective_from"]),
        input=_rate(path, f"{key}.input", entry["input"]),
        output=_rate(path, f"{key}.output", entry["output"]),
        hours=_hours(path, f"{key}.hours_utc", entry.get("hours_utc")),
        **optional,
    )
