"""Who is asking: the rate limiter's key, taken from the client address.

``X-Forwarded-For`` is a list each proxy *appends* its peer's address to, so
only the entries added by proxies we trust are facts; everything to their left
was written by the client and may be invented. Two ways to say which proxies
are ours:

- ``networks``: the peer and each entry are checked against trusted networks,
  walking the list from the right; the first untrusted address is the client.
  A peer outside those networks is the client itself and its header is ignored.
- ``hops``: exactly N proxies stand in front of every request (a platform load
  balancer, say), so the client is the N-th entry from the right. A list with
  fewer entries did not pass through them all; the peer is used instead.

Either way a client talking to us directly, or putting its own
``X-Forwarded-For`` in front of our proxies, cannot choose its key.

IPv6 clients get their whole ``/64`` (configurable) as one key: a single host
usually owns a /64 and can rotate through it at will, so per-address keys would
let it escape any limit.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ledger.errors import ConfigurationError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: The key of a request with no address at all (a Unix socket, a test client).
UNKNOWN_CLIENT: Final = "unknown"


@functools.lru_cache(maxsize=16_384)
def parse_address(raw: str) -> IPAddress | None:
    """An address from a header entry or ASGI peer (ports and brackets dropped), or None.

    Cached (bounded): ``ipaddress`` parsing costs microseconds and the same
    addresses recur request after request.
    """
    text = raw.strip().strip('"')
    if text.startswith("["):  # "[2001:db8::1]:443"
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:  # "203.0.113.9:5678"
        text = text.partition(":")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def forwarded_for(headers: Iterable[tuple[bytes, bytes]]) -> list[str]:
    """The entries of every ``X-Forwarded-For`` header, in order (RFC 9110 §5.3 combining)."""
    entries: list[str] = []
    for name, value in headers:
        if name.lower() == b"x-forwarded-for":
            entries.extend(e.strip() for e in value.decode("latin-1").split(","))
    return [e for e in entries if e]


@dataclass(frozen=True, slots=True)
class ClientIdentity:
    """Turns a request's peer address and headers into a rate-limit key.

    With neither ``networks`` nor ``hops`` no header is trusted: the key is the
    peer address. Give one, not both.
    """

    networks: Sequence[IPNetwork] = ()
    hops: int = 0
    ipv6_prefix: int = 64
    _nets: tuple[IPNetwork, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.networks and self.hops:
            raise ConfigurationError("trusted proxies: give networks or a hop count, not both")
        if self.hops < 0 or not 1 <= self.ipv6_prefix <= 128:
            raise ConfigurationError("trusted proxies: hops must be >= 0, ipv6_prefix 1..128")
        object.__setattr__(self, "_nets", tuple(self.networks))

    @classmethod
    def from_spec(cls, spec: str | None) -> ClientIdentity:
        """From a setting: ``""`` (trust no proxy), ``"2"`` (hops) or comma-separated networks."""
        spec = (spec or "").strip()
        if not spec:
            return cls()
        if spec.isdigit():
            return cls(hops=int(spec))
        try:
            nets = [ipaddress.ip_network(p.strip(), strict=False) for p in spec.split(",")]
        except ValueError as exc:
            raise ConfigurationError(f"trusted proxies {spec!r}: {exc}") from None
        return cls(networks=nets)

    def _trusted(self, address: IPAddress) -> bool:
        return any(address in net for net in self._nets)

    def client_address(self, peer: str | None, xff: Sequence[str]) -> IPAddress | None:
        """The address this request is attributed to (see the module docstring)."""
        peer_address = parse_address(peer) if peer else None
        if self.hops:
            if len(xff) < self.hops:
                return peer_address
            return parse_address(xff[-self.hops]) or peer_address
        if peer_address is None or not self._nets or not self._trusted(peer_address):
            return peer_address
        closest = peer_address
        for entry in reversed(xff):
            address = parse_address(entry)
            if address is None:
                # Our proxies only ever append addresses; junk here came from the
                # client, so the last hop we trusted is the best we know.
                return closest
            if not self._trusted(address):
                return address
            closest = address
        return closest

    def key_for(self, address: IPAddress | None) -> str:
        """The limiter key of an address: itself for IPv4, its /64 (by default) for IPv6."""
        if address is None:
            return UNKNOWN_CLIENT
        if isinstance(address, ipaddress.IPv6Address) and self.ipv6_prefix < 128:
            net = ipaddress.IPv6Network((address, self.ipv6_prefix), strict=False)
            return str(net)
        return str(address)

    def key(self, scope: Mapping[str, Any]) -> str:
        """The limiter key of an ASGI HTTP ``scope``."""
        client = scope.get("client")
        peer = str(client[0]) if client else None
        xff = forwarded_for(scope.get("headers") or ()) if (self._nets or self.hops) else []
        return self.key_for(self.client_address(peer, xff))
