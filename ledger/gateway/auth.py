"""Gateway keys: presented as ``Authorization: Bearer …`` (OpenAI SDKs) or ``x-api-key``
(Anthropic SDKs), stored only as SHA-256 digests, each mapped to the tags its rows carry.

A presented key is hashed and looked up by digest, so the secret never sits in
memory beside the table and a lookup costs one hash. Keys are random tokens of
at least 128 bits (:func:`new_key`), so an unsalted fast hash is the right tool:
salting and stretching defend guessable passwords, not random keys.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Mapping
from typing import Final

from ledger.gateway.config import GatewayKey

#: The prefix of keys made by :func:`new_key` (recognisable in a leaked-secret scan).
KEY_PREFIX: Final = "lgw-"


def hash_key(secret: str) -> str:
    """The SHA-256 hex digest under which ``secret`` is stored."""
    return hashlib.sha256(secret.strip().encode("utf-8")).hexdigest()


def new_key() -> str:
    """A fresh gateway key: 256 random bits, URL-safe."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def presented_key(headers: Mapping[bytes, bytes]) -> str | None:
    """The key a request presents (``Authorization: Bearer`` first, then ``x-api-key``)."""
    raw = headers.get(b"authorization")
    if raw is not None:
        scheme, _, value = raw.decode("latin-1").partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    raw = headers.get(b"x-api-key")
    if raw is not None and raw.strip():
        return raw.decode("latin-1").strip()
    return None


class KeyTable:
    """Finds the :class:`GatewayKey` of a presented secret."""

    def __init__(self, keys: Iterable[GatewayKey]) -> None:
        self._by_digest = {k.sha256: k for k in keys}

    def __len__(self) -> int:
        return len(self._by_digest)

    def find(self, secret: str | None) -> GatewayKey | None:
        if not secret:
            return None
        return self._by_digest.get(hash_key(secret))
