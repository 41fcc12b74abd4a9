"""Defensive readers for provider JSON: every helper accepts anything and never raises.

Providers are not always consistent (contract §1), and bodies can be
truncated, non-UTF-8 or simply not JSON. These helpers turn whatever arrived
into typed values or None, and clamp token counts into what the ledger stores.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any, Final

from ledger.events import MAX_TOKENS
from ledger.providers.base import Usage

_MAX_COST: Final = Decimal(10) ** 9
# One decoder for every call: json.loads(parse_float=...) would build a new one each time.
_DECODER: Final = json.JSONDecoder(parse_float=Decimal)


def loads(data: bytes | str) -> Any:
    """The JSON value in ``data``, floats as ``Decimal`` (money stays exact); None if unreadable."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        return _DECODER.decode(text)
    except (ValueError, RecursionError, TypeError):
        # ValueError covers JSONDecodeError and UnicodeDecodeError (non-UTF-8 bytes).
        return None


# The C scanner JSONDecoder.decode ends up in, called directly (typeshed omits the attribute).
_SCAN: Final[Callable[[str, int], tuple[Any, int]]] = _DECODER.scan_once  # type: ignore[attr-defined]


def loads_text(text: str) -> Any:
    """:func:`loads` for text already decoded (a stream event's data), faster.

    One stream chunk after another goes through here, so the common case (the text
    is exactly one JSON value) skips ``JSONDecoder.decode``'s whitespace handling and
    calls the scanner directly; anything else takes :func:`loads`, so the result is
    always the same.
    """
    try:
        value, end = _SCAN(text, 0)
    except (StopIteration, ValueError, RecursionError):
        return loads(text)
    return value if end == len(text) else loads(text)


def obj(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def text(value: Any) -> str | None:
    """A non-empty string, or None."""
    return value if isinstance(value, str) and value else None


def count(value: Any) -> int | None:
    """A token count as reported, or None when absent or not a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        return int(value)
    return None


def cost(value: Any) -> Decimal | None:
    """A reported USD cost (0 included: a free model's cost is a reported 0, not unknown)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        value = Decimal(value)
    if isinstance(value, Decimal) and value.is_finite() and 0 <= value < _MAX_COST:
        return value
    return None


class UsageBuilder:
    """Collects reported counters, then clamps them into a :class:`Usage` the ledger accepts.

    Counts are recorded as reported (contract §1), except what storage cannot
    hold: negatives become 0, huge values ``MAX_TOKENS``, and a cache count
    above ``input_tokens`` is lowered to it. Each adjustment is a problem.
    """

    def __init__(self, problems: list[str]) -> None:
        self._problems = problems

    def _clamp(self, name: str, value: int | None) -> int:
        if value is None:
            return 0
        if value < 0:
            self._problems.append(f"{name} {value} is negative; recorded 0")
            return 0
        if value > MAX_TOKENS:
            self._problems.append(f"{name} {value} is absurd; recorded {MAX_TOKENS}")
            return MAX_TOKENS
        return value

    def build(
        self,
        *,
        input_tokens: int | None,
        output_tokens: int | None,
        cache_read: int | None = None,
        cache_write: int | None = None,
        reasoning: int | None = None,
        cache_write_1h: int | None = None,
        input_audio: int | None = None,
        cache_audio_read: int | None = None,
        output_audio: int | None = None,
        modalities: Sequence[tuple[str, str, int | None]] = (),
    ) -> Usage:
        # The usual report (every call parses one): counts absent or in range, each subset
        # within its total. Nothing to clamp, no problem to note: the Usage is the counts
        # as they are, which the checks below would also give, one call at a time.
        total_in, output = input_tokens or 0, output_tokens or 0
        read, write, write_1h = cache_read or 0, cache_write or 0, cache_write_1h or 0
        audio_in, audio_read, audio_out = input_audio or 0, cache_audio_read or 0, output_audio or 0
        thinking = reasoning or 0
        if (
            0 <= total_in <= MAX_TOKENS
            and 0 <= output <= MAX_TOKENS
            and 0 <= thinking <= MAX_TOKENS
            and 0 <= read <= total_in
            and 0 <= write <= total_in
            and 0 <= write_1h <= write
            and 0 <= audio_in <= total_in
            and 0 <= audio_read <= read
            and 0 <= audio_out <= output
            and all(t is None or 0 <= t <= MAX_TOKENS for _, _, t in modalities)
        ):
            return Usage(
                input_tokens=total_in,
                output_tokens=output,
                cache_read_tokens=read,
                cache_write_tokens=write,
                reasoning_tokens=thinking,
                cache_write_1h_tokens=write_1h,
                input_audio_tokens=max(audio_in, audio_read),
                cache_audio_read_tokens=audio_read,
                output_audio_tokens=audio_out,
                modalities=tuple((p, m, t) for p, m, t in modalities if t is not None),
            )
        return self.clamped(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read=cache_read,
            cache_write=cache_write,
            reasoning=reasoning,
            cache_write_1h=cache_write_1h,
            input_audio=input_audio,
            cache_audio_read=cache_audio_read,
            output_audio=output_audio,
            modalities=modalities,
        )

    def clamped(
        self,
        *,
        input_tokens: int | None,
        output_tokens: int | None,
        cache_read: int | None = None,
        cache_write: int | None = None,
        reasoning: int | None = None,
        cache_write_1h: int | None = None,
        input_audio: int | None = None,
        cache_audio_read: int | None = None,
        output_audio: int | None = None,
        modalities: Sequence[tuple[str, str, int | None]] = (),
    ) -> Usage:
        """:meth:`build` for any counts: each one clamped, each adjustment a problem."""
        total_in = self._clamp("input_tokens", input_tokens)
        read = self._clamp("cache_read_tokens", cache_read)
        write = self._clamp("cache_write_tokens", cache_write)
        if read > total_in:
            self._problems.append(f"cache_read_tokens {read} > input_tokens {total_in}; lowered")
            read = total_in
        if write > total_in:
            self._problems.append(f"cache_write_tokens {write} > input_tokens {total_in}; lowered")
            write = total_in
        write_1h = self._clamp("cache_write_1h_tokens", cache_write_1h)
        if write_1h > write:
            self._problems.append(f"1-hour cache writes {write_1h} > cache_write_tokens; lowered")
            write_1h = write
        output = self._clamp("output_tokens", output_tokens)
        audio_in = self._subset("input_audio_tokens", input_audio, "input_tokens", total_in)
        audio_read = self._subset(
            "cache_audio_read_tokens", cache_audio_read, "cache_read_tokens", read
        )
        audio_in = max(audio_in, audio_read)  # cached audio is audio input too
        audio_out = self._subset("output_audio_tokens", output_audio, "output_tokens", output)
        return Usage(
            input_tokens=total_in,
            output_tokens=output,
            cache_read_tokens=read,
            cache_write_tokens=write,
            reasoning_tokens=self._clamp("reasoning_tokens", reasoning),
            cache_write_1h_tokens=write_1h,
            input_audio_tokens=audio_in,
            cache_audio_read_tokens=audio_read,
            output_audio_tokens=audio_out,
            modalities=tuple(
                (part, modality, self._clamp_modality(part, modality, tokens))
                for part, modality, tokens in modalities
                if tokens is not None
            ),
        )

    def _clamp_modality(self, part: str, modality: str, tokens: int) -> int:
        if 0 <= tokens <= MAX_TOKENS:  # the usual case: no name to format
            return tokens
        return self._clamp(f"{part} {modality} tokens", tokens)

    def _subset(self, name: str, value: int | None, of: str, limit: int) -> int:
        count = self._clamp(name, value)
        if count > limit:
            self._problems.append(f"{name} {count} > {of} {limit}; lowered")
            return limit
        return count


def safe_add(*values: int | None) -> int | None:
    """The sum of the reported values (None if none was reported)."""
    present = [v for v in values if v is not None]
    return sum(present) if present else None
