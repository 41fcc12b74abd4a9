"""Gateway keys: presented either way the SDKs send them, found by digest only."""

from __future__ import annotations

from ledger.gateway.auth import KEY_PREFIX, KeyTable, hash_key, new_key, presented_key
from ledger.gateway.config import GatewayKey


def test_new_keys_are_random_and_stored_as_their_sha256() -> None:
    a, b = new_key(), new_key()
    assert a != b and a.startswith(KEY_PREFIX) and len(a) > 40
    assert len(hash_key(a)) == 64 and hash_key(a) != hash_key(b)
    assert hash_key(a + "\n") == hash_key(a)  # pasted with a newline: same key


def test_bearer_and_x_api_key_are_both_read() -> None:
    assert presented_key({b"authorization": b"Bearer lgw-1"}) == "lgw-1"
    assert presented_key({b"authorization": b"bearer  lgw-1 "}) == "lgw-1"
    assert presented_key({b"x-api-key": b"lgw-2"}) == "lgw-2"
    assert presented_key({b"authorization": b"Basic abc"}) is None
    assert presented_key({}) is None


def test_the_table_finds_a_key_by_its_secret_only() -> None:
    key = GatewayKey("search", hash_key("lgw-1"), {"team": "search"})
    table = KeyTable([key])
    assert table.find("lgw-1") is key
    assert table.find(hash_key("lgw-1")) is None  # the digest itself is not a key
    assert table.find("lgw-2") is None and table.find(None) is None
