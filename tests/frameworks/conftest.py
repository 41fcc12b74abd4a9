"""The frameworks' recipes run against the simulator's real HTTP server, recorded into an
in-memory recorder (the fixtures of tests/instrument)."""

from typing import Final

import pytest

from tests.instrument.conftest import rows, sim_server  # noqa: F401 (fixtures)

#: The tests of LangChain's standard suites (test_langchain_standard.py) that download a
#: file from the internet: skipped by name, with the reason, since the suite refuses
#: overrides of its tests that are not xfails.
NEEDS_INTERNET: Final = frozenset(
    {
        "test_image_inputs",
        "test_image_tool_message",
        "test_pdf_inputs",
        "test_pdf_tool_message",
        "test_audio_inputs",
    }
)
INTERNET: Final = "downloads its test file from the internet (CI runs offline, on loopback)"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skips :data:`NEEDS_INTERNET` in LangChain's standard suites, naming why."""
    for item in items:
        name = getattr(item, "originalname", item.name)
        if item.nodeid.split("::")[0].endswith("test_langchain_standard.py") and (
            name in NEEDS_INTERNET
        ):
            item.add_marker(pytest.mark.skip(reason=f"{name} {INTERNET}"))
