"""Price overrides: your own per-million rates, used instead of genai-prices.

Read by :mod:`ledger.config` (section ``prices``), found like every section
(first found wins, never merged)::

    1. an explicit path (``ledger reprice --prices FILE``, ``load_prices(path=…)``)
    2. the file named by ``LEDGER_PRICES_FILE`` (else ``LEDGER_CONFIG_FILE``)
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
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from ledger import config as cfg
from ledger.errors import PriceConfigurationError
from ledger.providers.base import Usage

ENV_PRICES_FILE: Final = "LEDGER_PRICES_FILE"
LEDGER_TOML: Final = cfg.LEDGER_TOML
PYPROJECT: Final = cfg.PYPROJECT

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
_MTOK: Final = Decimal(1_000_000)


@dataclass(frozen=True, slots=True)
class PriceOverride:
    """One provider's model priced from ``effective_from`` (and within ``hours``, when set)."""

    provider: str = cfg.setting(
        doc="the ledger's provider name (the row's provider)", example='"mistral"'
    )
    model: str = cfg.setting(
        doc="the model that served the call (the row's model)", example='"mistral-large-latest"'
    )
    effective_from: dt.date = cfg.setting(
        doc="a UTC date; the latest one on or before the call wins", example="2025-12-02"
    )
    input: Decimal = cfg.setting(doc="USD per million input tokens (required)", example="0.5")
    output: Decimal = cfg.setting(doc="USD per million output tokens (required)", example="1.5")
    cache_read: Decimal | None = cfg.setting(
        default=None, doc="cache-read tokens: USD per million (optional)", example="0.05"
    )
    cache_write: Decimal | None = cfg.setting(
        default=None, doc="5-minute cache writes: USD per million (optional)", example="3.75"
    )
    cache_write_1h: Decimal | None = cfg.setting(
        default=None, doc="1-hour cache writes: USD per million (optional)", example="6.0"
    )
    reasoning: Decimal | None = cfg.setting(
        default=None,
        doc="reasoning tokens (inside output; else at output): USD per million (optional)",
        example="1.5",
    )
    input_audio: Decimal | None = cfg.setting(
        default=None, doc="audio input tokens: USD per million (optional)", example="1.0"
    )
    cache_audio_read: Decimal | None = cfg.setting(
        default=None, doc="audio cache-read tokens: USD per million (optional)", example="0.1"
    )
    output_audio: Decimal | None = cfg.setting(
        default=None, doc="audio output tokens: USD per million (optional)", example="10.0"
    )
    hours: tuple[dt.time, dt.time] | None = cfg.setting(
        default=None,
        key="hours_utc",
        doc="only calls starting in this UTC window (e.g. DeepSeek's off-peak discount); "
        "it wins over an override without one",
        example='["16:30", "00:30"]',
    )

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
SECTION: Final = cfg.Section(
    "prices",
    PriceOverride,
    PriceConfigurationError,
    env_file=ENV_PRICES_FILE,
    summary="Price overrides (an array of tables), used instead of genai-prices for "
    "computed costs.",
    array=True,
)
KEYS: Final = cfg.keys_of(PriceOverride)


def find_prices(start: Path | None = None) -> Path | None:
    """The price-override file that applies from ``start`` (default: the working directory)."""
    return cfg.find_file(SECTION, start)


def load_prices(path: Path | None = None, *, start: Path | None = None) -> PriceBook:
    """The overrides of ``path`` (else of :func:`find_prices`); none found → no overrides."""
    found = cfg.read_table(SECTION, path, start=start)
    if found is None:
        return NO_OVERRIDES
    table, where = found
    if table is None:
        if path is not None:
            where.fail(where.prefix, "an array of price tables", None, said="no such table")
        return NO_OVERRIDES
    return parse_prices(table, where.path, table_key=where.prefix)


def parse_prices(
    table: Any, path: Path | None = None, *, table_key: str | None = None
) -> PriceBook:
    """Check an array of price tables (as parsed from TOML) and build the book.

    ``table_key`` names the array in messages (default: by the file's name)."""
    where = SECTION.where(path, table_key)
    prefix = where.prefix
    if not isinstance(table, list):
        where.fail(prefix, f"an array of tables ([[{prefix}]])", table)
    overrides = [_override(where, f"{prefix}[{i}]", entry) for i, entry in enumerate(table)]
    seen: dict[tuple[Any, ...], int] = {}
    for i, o in enumerate(overrides):
        identity = (o.provider, o.model, o.effective_from, o.hours)
        if identity in seen:
            where.fail(
                f"{prefix}[{i}]",
                "one override per provider, model, effective_from and hours_utc",
                None,
                said=f"the same as {prefix}[{seen[identity]}]",
            )
        seen[identity] = i
    return PriceBook(tuple(overrides), path)


def _rate_of(where: cfg.Where, key: str, value: Any) -> Decimal:
    return cfg.usd(where, key, value, unit="USD per million tokens", most=1_000_000)


def _date(where: cfg.Where, key: str, value: Any) -> dt.date:
    if isinstance(value, dt.datetime) or not isinstance(value, dt.date):
        where.fail(key, "a TOML date such as 2025-12-02 (UTC)", value)
    return value


def _hours(where: cfg.Where, key: str, value: Any) -> tuple[dt.time, dt.time] | None:
    if value is None:
        return None
    expected = 'two "HH:MM" UTC times, start and end, e.g. ["16:30", "00:30"]'
    if not isinstance(value, list) or len(value) != 2 or not all(isinstance(v, str) for v in value):
        where.fail(key, expected, value)
    try:
        start, end = (dt.time.fromisoformat(v) for v in value)
    except ValueError:
        where.fail(key, expected, value)
    if start == end:
        where.fail(key, "a window of some length (start != end)", value)
    return start, end


def _override(where: cfg.Where, key: str, entry: Any) -> PriceOverride:
    if not isinstance(entry, Mapping):
        where.fail(key, "a table", entry)
    cfg.only_known(where, key, entry, KEYS)
    for name in ("provider", "model", "effective_from", *REQUIRED_RATES):
        if name not in entry:
            where.fail(f"{key}.{name}", "a value (required)", None, said="nothing")
    optional = {
        name: _rate_of(where, f"{key}.{name}", entry[name])
        for name in OPTIONAL_RATES
        if name in entry
    }
    return PriceOverride(
        provider=cfg.text(where, f"{key}.provider", entry["provider"]),
        model=cfg.text(where, f"{key}.model", entry["model"]),
        effective_from=_date(where, f"{key}.effective_from", entry["effective_from"]),
        input=_rate_of(where, f"{key}.input", entry["input"]),
        output=_rate_of(where, f"{key}.output", entry["output"]),
        hours=_hours(where, f"{key}.hours_utc", entry.get("hours_utc")),
        **optional,
    )
