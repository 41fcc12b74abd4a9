"""The real client, pointed at an in-process simulator, on the simulator's clock.

Nothing here fakes the client: requests are built by the provider modules,
travel through httpx to :class:`~ledger.simulator.SimulatorTransport`, and
come back parsed, priced and recorded exactly as they would from the real
services. Two things differ from production, both by configuration:

* the client reads time from the simulator (:class:`SimulatedTime`), so rows
  carry the virtual time a workload spans, latencies included;
* sessions "without the key" go through :class:`UnkeyedOpenRouter`, OpenRouter
  as a client configured before ADR 0221: it records ``session_id`` and
  ``actor_id`` but sends no sticky key, so OpenRouter falls back to hashing
  the opening messages.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import ClassVar, Final

import httpx

from ledger.client import Client, Recorder
from ledger.providers import AnthropicProvider, OpenAIProvider, OpenRouterProvider
from ledger.providers.base import Capabilities, Provider
from ledger.simulator import Clock, Simulator, SimulatorTransport

#: The key the demo's clients send. The simulator keeps no keys (it derives an
#: account id from it), and the ledger never records one.
DEMO_API_KEY: Final = "sk-demo-not-a-real-key"


class SimulatedTime:
    """The client's clock (:class:`~ledger.clock.Clock`) read from a simulator clock."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self._clock.time(), dt.UTC)

    def monotonic(self) -> float:
        return self._clock.time()


class UnkeyedOpenRouter(OpenRouterProvider):
    """OpenRouter without the sticky-session capability: the key is never sent."""

    capabilities: ClassVar[Capabilities] = replace(
        OpenRouterProvider.capabilities, sticky_session=False
    )


def _providers(*, keyed: bool) -> list[Provider]:
    router: type[OpenRouterProvider] = OpenRouterProvider if keyed else UnkeyedOpenRouter
    # Explicit URLs: an OPENAI_BASE_URL in the environment must not divert the
    # demo (the simulator routes by path, so the official ones work as they are).
    return [
        router(api_key=DEMO_API_KEY, base_url=OpenRouterProvider.default_base_url),
        OpenAIProvider(api_key=DEMO_API_KEY, base_url=OpenAIProvider.default_base_url),
        AnthropicProvider(api_key=DEMO_API_KEY, base_url=AnthropicProvider.default_base_url),
    ]


@dataclass(slots=True)
class SimulatedClients:
    """A client that sends the sticky key and one that does not, sharing one transport."""

    keyed: Client
    unkeyed: Client
    http: httpx.Client
    clock: SimulatedTime

    def close(self) -> None:
        self.keyed.close()
        self.unkeyed.close()
        self.http.close()


def simulated_clients(
    sim: Simulator, recorder: Recorder, *, session_prefix: str, strict: bool = False
) -> SimulatedClients:
    """Real clients over ``sim``'s in-process transport, recording into ``recorder``."""
    http = httpx.Client(transport=SimulatorTransport(sim))
    clock = SimulatedTime(sim.clock)

    def client(keyed: bool) -> Client:
        return Client(
            providers=_providers(keyed=keyed),
            ledger=recorder,
            http_client=http,
            session_prefix=session_prefix,
            strict=strict,
            clock=clock,
        )

    return SimulatedClients(client(True), client(False), http, clock)
