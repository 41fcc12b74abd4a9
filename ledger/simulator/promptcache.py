"""Prompt shape and a per-upstream, prefix-based prompt cache.

A prompt is reduced once, on arrival, to its *prefix boundaries*: a chained
digest after each segment (tools, then each message in order) with the
cumulative token count at that point. A cache then only stores and looks up
digests, so bookkeeping per request is a handful of dict operations however
long the conversation (the demo sends tens of thousands of requests).

Semantics follow the real implicit/explicit caches: a hit is the longest
previously seen prefix that is at least ``min_tokens`` long and still within
its TTL on *this* upstream; a hit refreshes the entry's TTL; a successful
request writes every boundary of its prompt from the minimum length up.
Tokens are estimated at four characters each plus four per message.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

#: Per-message framing tokens (role markers), as chat templates add.
MESSAGE_OVERHEAD_TOKENS: Final = 4
#: Expired entries are swept when a cache grows past this many boundaries.
_SWEEP_AT: Final = 20_000


def text_tokens(text: str) -> int:
    """Estimated tokens of a text: one per four characters, rounded up."""
    return (len(text) + 3) // 4


@dataclass(frozen=True, slots=True)
class Prompt:
    """A request's prompt as the caches and the router see it."""

    boundaries: tuple[bytes, ...]
    cumulative_tokens: tuple[int, ...]
    conversation_hash: str
    cache_control: bool

    @property
    def tokens(self) -> int:
        return self.cumulative_tokens[-1] if self.cumulative_tokens else 0


def build_prompt(
    segments: Sequence[str],
    *,
    first_system: str | None,
    first_other: str | None,
    cache_control: bool = False,
) -> Prompt:
    """Digest ``segments`` (canonical text of tools and each message, in order).

    ``conversation_hash`` is OpenRouter's default sticky key: a hash of the
    first system (or developer) message and the first non-system message.
    """
    digest = hashlib.blake2b(digest_size=16)
    boundaries: list[bytes] = []
    cumulative: list[int] = []
    total = 0
    for segment in segments:
        digest.update(segment.encode())
        digest.update(b"\x1e")
        boundaries.append(digest.digest())
        total += text_tokens(segment) + MESSAGE_OVERHEAD_TOKENS
        cumulative.append(total)
    conv = hashlib.blake2b(digest_size=12)
    conv.update((first_system or "").encode())
    conv.update(b"\x1e")
    conv.update((first_other or "").encode())
    return Prompt(tuple(boundaries), tuple(cumulative), conv.hexdigest(), cache_control)


@dataclass(frozen=True, slots=True)
class CacheResult:
    """What one request read from and wrote to an upstream's cache."""

    read_tokens: int
    write_tokens: int


class PromptCache:
    """One upstream's prompt cache: prefix digest -> (written since, expiry time).

    An entry is live from the write that created it to its expiry; a request asked
    about a time before that write (overlapping requests run in the order they
    started, and a write is stamped at its request's first byte) does not see it.
    """

    def __init__(self, *, min_tokens: int, ttl_s: float) -> None:
        if min_tokens < 1 or ttl_s <= 0:
            raise ValueError("min_tokens must be >= 1 and ttl_s > 0")
        self.min_tokens = min_tokens
        self.ttl_s = ttl_s
        self._entries: dict[bytes, tuple[float, float]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def peek(self, prompt: Prompt, now: float) -> int:
        """Tokens a request with ``prompt`` would read from the cache at ``now``."""
        entries = self._entries
        for i in range(len(prompt.boundaries) - 1, -1, -1):
            tokens = prompt.cumulative_tokens[i]
            if tokens < self.min_tokens:
                break
            since, until = entries.get(prompt.boundaries[i], _NEVER)
            if since <= now < until:
                return tokens
        return 0

    def use(self, prompt: Prompt, now: float, ttl_s: float | None = None) -> CacheResult:
        """Serve ``prompt`` at ``now``: read the longest live prefix, write the rest.

        ``ttl_s`` is the lifetime the request asked for (Anthropic's ``ttl``), else the
        upstream's; every prefix it touches lives at least that long from ``now``.
        """
        read = self.peek(prompt, now)
        entries = self._entries
        until = now + (ttl_s if ttl_s is not None else self.ttl_s)
        cacheable = 0
        for boundary, tokens in zip(prompt.boundaries, prompt.cumulative_tokens, strict=True):
            if tokens >= self.min_tokens:
                since, expiry = entries.get(boundary, _NEVER)
                # unexpired (live, or written by a request that started later): one entry
                entries[boundary] = (
                    (min(since, now), max(expiry, until)) if expiry > now else (now, until)
                )
                cacheable = tokens
        if len(entries) > _SWEEP_AT:
            self._sweep(now)
        return CacheResult(read_tokens=read, write_tokens=max(cacheable - read, 0))

    def _sweep(self, now: float) -> None:
        self._entries = {k: v for k, v in self._entries.items() if v[1] > now}


#: What a digest never written reads as: live over no time at all.
_NEVER: Final = (0.0, 0.0)
