"""The frameworks' recipes run against the simulator's real HTTP server, recorded into an
in-memory recorder (the fixtures of tests/instrument)."""

from tests.instrument.conftest import rows, sim_server  # noqa: F401 (fixtures)
