"""Requests the gateway cannot read are 400s that say why, never 500s with a traceback:
a lone UTF-16 surrogate escape in the body (Python's json takes it, then encoding it
upstream fails), an ``x-ledger-tags`` header nested past the parser's depth."""

from __future__ import annotations

import logging

import httpx
import pytest

from tests.gateway.conftest import KEY, Served
from tests.llm_loopback import Rows

SMALL = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


def _no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []


def test_a_lone_surrogate_in_the_body_is_a_400_naming_it(
    gateway: Served, rows: Rows, caplog: pytest.LogCaptureFixture
) -> None:
    raw = b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "a\\ud800b"}]}'
    with caplog.at_level(logging.INFO):
        answer = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            content=raw,
            headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"},
            timeout=10,
        )
    assert answer.status_code == 400
    assert "surrogate" in answer.json()["error"]["message"]
    _no_traceback(caplog)
    assert rows.events == []


def test_deeply_nested_tags_header_is_a_400_naming_the_header(
    gateway: Served, rows: Rows, caplog: pytest.LogCaptureFixture
) -> None:
    tags = '{"a":' * 3000 + "1" + "}" * 3000
    with caplog.at_level(logging.INFO):
        answer = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json=SMALL,
            headers={"authorization": f"Bearer {KEY}", "x-ledger-tags": tags},
            timeout=10,
        )
    assert answer.status_code == 400
    assert "x-ledger-tags is nested too deeply" in answer.json()["error"]["message"]
    _no_traceback(caplog)
    assert rows.events == []


def test_a_paired_surrogate_escape_is_the_character_it_names(gateway: Served, rows: Rows) -> None:
    raw = b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}'
    answer = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        content=raw,
        headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"},
        timeout=10,
    )
    assert answer.status_code == 200
    assert len(rows.wait(1)) == 1
