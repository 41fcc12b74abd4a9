"""The exception tree: one classification of statuses and transport failures."""

from __future__ import annotations

import datetime as dt
import importlib
import inspect
import pkgutil
import re

import httpx
import pytest

import ledger
from ledger import errors
from ledger.errors import (
    ProviderTimeout,
    ProviderTransportError,
    classify_status,
    http_error,
    map_transport_errors,
    parse_retry_after,
    redact,
)


@pytest.mark.parametrize(
    ("status", "error_type", "transient"),
    [
        (429, "rate_limited", True),
        (500, "server_error", True),
        (502, "server_error", True),
        (503, "server_error", True),
        (529, "server_error", True),
        (400, "client_error", False),
        (401, "client_error", False),
        (404, "client_error", False),
        (422, "client_error", False),
    ],
)
def test_statuses_are_classified_once(status: int, error_type: str, transient: bool) -> None:
    assert classify_status(status) == (error_type, transient)
    exc = http_error(status, "x", provider="p")
    assert (exc.error_type, exc.transient, exc.http_status) == (error_type, transient, status)


def _request_errors() -> list[type[httpx.RequestError]]:
    return [
        cls
        for _, cls in inspect.getmembers(httpx, inspect.isclass)
        if issubclass(cls, httpx.RequestError) and cls is not httpx.RequestError
    ]


@pytest.mark.parametrize("cls", _request_errors(), ids=lambda c: c.__name__)
def test_every_httpx_request_error_maps_to_a_transport_error(
    cls: type[httpx.RequestError],
) -> None:
    with pytest.raises(ProviderTransportError) as info, map_transport_errors("p"):
        raise cls("boom")
    expected = (
        ProviderTimeout if issubclass(cls, httpx.TimeoutException) else ProviderTransportError
    )
    assert type(info.value) is expected and info.value.transient
    assert info.value.error_type == ("timeout" if expected is ProviderTimeout else "transport")


def test_retry_after_reads_milliseconds_seconds_and_dates() -> None:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert parse_retry_after({"Retry-After-Ms": "250"}) == 0.25
    assert parse_retry_after({"retry-after": "12"}) == 12
    assert parse_retry_after({"retry-after": "Thu, 01 Jan 2026 00:00:30 GMT"}, now) == 30
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_key_shaped_strings_are_redacted() -> None:
    assert "sk-abc" not in redact("bad key sk-abcdefghijklmnopqrstu given")
    assert redact("my secret value", ("secret",)) == "my *** value"


def test_the_tree_is_drawn_in_the_module_docstring() -> None:
    """Every LedgerError of the package, wherever it is defined, is in the drawn tree."""
    for module in pkgutil.walk_packages(ledger.__path__, "ledger."):
        importlib.import_module(module.name)
    doc = errors.__doc__ or ""
    drawn = set(re.findall(r"[├└]── (\w+)", doc))
    found, todo = set(), [errors.LedgerError]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("ledger.") and not sub.__name__.startswith("_"):
                found.add(sub.__name__)
                todo.append(sub)
    assert found <= drawn, sorted(found - drawn)
    for name, cls in inspect.getmembers(errors, inspect.isclass):
        if issubclass(cls, errors.LedgerError):
            assert name in doc, name
