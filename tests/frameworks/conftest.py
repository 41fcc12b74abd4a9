"""The frameworks' recipes run against the simulator's real HTTP server, recorded into an
in-memory recorder (the fixtures of tests/instrument)."""

import pytest

from tests.instrument.conftest import rows, sim_server  # noqa: F401 (fixtures)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """LangChain's standard suites: the tests that download files are skipped by name, with
    the reason (the suite refuses overrides of its tests that are not xfails)."""
    from tests.frameworks.test_langchain_standard import INTERNET, NEEDS_INTERNET

    for item in items:
        name = getattr(item, "originalname", item.name)
        if item.nodeid.split("::")[0].endswith("test_langchain_standard.py") and (
            name in NEEDS_INTERNET
        ):
            item.add_marker(pytest.mark.skip(reason=f"{name} {INTERNET}"))
