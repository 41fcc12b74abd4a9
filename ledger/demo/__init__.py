"""``ledger demo``: a simulated multi-agent workload through the real client.

::

    from ledger.demo import run_demo
    stats = run_demo("sqlite:///demo.db", calls=2_000, seed=1)   # a migrated ledger

:mod:`ledger.demo.workload` says what is simulated (agents, prompts, faults),
:mod:`ledger.demo.runner` runs it on the simulator's virtual clock and
:mod:`ledger.demo.wiring` points the real client at the simulator.
"""

from ledger.demo.runner import DEFAULT_CALLS, DemoStats, Workload, next_start, run_demo
from ledger.demo.wiring import SimulatedClients, SimulatedTime, UnkeyedOpenRouter, simulated_clients
from ledger.demo.workload import AGENTS, BURSTS, DEMO_EPOCH, Agent, Burst, demo_catalog

__all__ = [
    "AGENTS",
    "BURSTS",
    "DEFAULT_CALLS",
    "DEMO_EPOCH",
    "Agent",
    "Burst",
    "DemoStats",
    "SimulatedClients",
    "SimulatedTime",
    "UnkeyedOpenRouter",
    "Workload",
    "demo_catalog",
    "next_start",
    "run_demo",
    "simulated_clients",
]
