"""A local stand-in for OpenRouter, OpenAI and Anthropic, with real routing semantics.

Use it in-process (``httpx.Client(transport=SimulatorTransport(sim))``) or as
a real server (``ledger simulate --port P``, :func:`serve_in_thread`).
See :mod:`ledger.simulator.routing` for the documented behaviour it follows.
"""

from ledger.simulator.catalog import Catalog, Latency, ModelPool, UpstreamSpec, default_catalog
from ledger.simulator.clock import Clock, VirtualClock, WallClock
from ledger.simulator.core import ChatRequest, Completion, Failure, Simulator, Usage, charge
from ledger.simulator.faults import Fault, FaultInjector, FaultKind
from ledger.simulator.routing import PIN_IDLE_S, ProviderPrefs
from ledger.simulator.server import SimulatorApp, make_server, serve_in_thread
from ledger.simulator.transport import AsyncSimulatorTransport, SimulatorTransport

__all__ = [
    "PIN_IDLE_S",
    "AsyncSimulatorTransport",
    "Catalog",
    "ChatRequest",
    "Clock",
    "Completion",
    "Failure",
    "Fault",
    "FaultInjector",
    "FaultKind",
    "Latency",
    "ModelPool",
    "ProviderPrefs",
    "Simulator",
    "SimulatorApp",
    "SimulatorTransport",
    "UpstreamSpec",
    "Usage",
    "VirtualClock",
    "WallClock",
    "charge",
    "default_catalog",
    "make_server",
    "serve_in_thread",
]
