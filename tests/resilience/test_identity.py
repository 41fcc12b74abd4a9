from __future__ import annotations

import ipaddress

import pytest

from ledger.errors import ConfigurationError
from ledger.resilience.identity import UNKNOWN_CLIENT, ClientIdentity, forwarded_for


def scope(peer: str | None, *xff: str) -> dict[str, object]:
    return {
        "type": "http",
        "client": (peer, 50000) if peer else None,
        "headers": [(b"x-forwarded-for", v.encode()) for v in xff],
    }


def test_without_trusted_proxies_the_header_is_ignored() -> None:
    identity = ClientIdentity()
    assert identity.key(scope("198.51.100.7", "1.2.3.4")) == "198.51.100.7"


def test_a_client_talking_directly_cannot_pick_its_key() -> None:
    identity = ClientIdentity.from_spec("10.0.0.0/8")
    assert identity.key(scope("198.51.100.7", "1.2.3.4")) == "198.51.100.7"


def test_behind_a_trusted_proxy_the_forwarded_client_is_the_key() -> None:
    identity = ClientIdentity.from_spec("10.0.0.0/8")
    assert identity.key(scope("10.0.0.2", "203.0.113.9")) == "203.0.113.9"


def test_a_spoofed_entry_left_of_our_proxies_is_ignored() -> None:
    # client 203.0.113.9 sent "X-Forwarded-For: 1.1.1.1"; proxy 10.0.0.5 appended it.
    identity = ClientIdentity.from_spec("10.0.0.0/8")
    request = scope("10.0.0.2", "1.1.1.1, 203.0.113.9, 10.0.0.5")
    assert identity.key(request) == "203.0.113.9"


def test_junk_in_the_header_falls_back_to_the_last_trusted_hop() -> None:
    identity = ClientIdentity.from_spec("10.0.0.0/8")
    assert identity.key(scope("10.0.0.2", "not-an-ip, 10.0.0.5")) == "10.0.0.5"


def test_hop_count_takes_the_nth_entry_from_the_right() -> None:
    identity = ClientIdentity.from_spec("2")
    assert identity.key(scope("10.9.9.9", "6.6.6.6, 203.0.113.9, 10.0.0.5")) == "203.0.113.9"


def test_hop_count_with_too_few_entries_uses_the_peer() -> None:
    identity = ClientIdentity(hops=2)
    assert identity.key(scope("192.0.2.1", "6.6.6.6")) == "192.0.2.1"


def test_several_headers_are_read_in_order() -> None:
    headers = [(b"X-Forwarded-For", b"1.1.1.1, 2.2.2.2"), (b"x-forwarded-for", b"3.3.3.3")]
    assert forwarded_for(headers) == ["1.1.1.1", "2.2.2.2", "3.3.3.3"]
    assert ClientIdentity(hops=1).key({"client": ("10.0.0.1", 1), "headers": headers}) == "3.3.3.3"


def test_ports_brackets_and_mapped_addresses_are_normalised() -> None:
    identity = ClientIdentity(hops=1)
    assert identity.key(scope("10.0.0.1", "203.0.113.9:4431")) == "203.0.113.9"
    assert identity.key(scope("10.0.0.1", "::ffff:203.0.113.9")) == "203.0.113.9"
    assert identity.key(scope("10.0.0.1", "[2001:db8::1]:443")) == "2001:db8::/64"


def test_ipv6_clients_share_their_slash_64() -> None:
    identity = ClientIdentity()
    a = identity.key(scope("2001:db8:1:2::1"))
    b = identity.key(scope("2001:db8:1:2:ffff::9"))
    assert a == b == "2001:db8:1:2::/64"
    assert ClientIdentity(ipv6_prefix=128).key(scope("2001:db8::1")) == "2001:db8::1"


def test_a_request_without_an_address_has_the_unknown_key() -> None:
    assert ClientIdentity().key(scope(None)) == UNKNOWN_CLIENT


def test_bad_settings_are_rejected() -> None:
    with pytest.raises(ConfigurationError):
        ClientIdentity.from_spec("10.0.0.0/8,banana")
    with pytest.raises(ConfigurationError):
        ClientIdentity(networks=[ipaddress.ip_network("10.0.0.0/8")], hops=1)
