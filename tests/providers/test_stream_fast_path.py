"""The chat stream parser reads plain delta chunks for their choices only; it must give
the same text and the same row as decoding every chunk whole.

The reference is the same parser with the shortcut off (``_fast = False``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.providers.base import Parsed
from ledger.providers.openai_chat import ChatStreamParser
from tests.providers.test_provider_payloads import PAYLOADS
from tests.providers.test_usage_stream_parser import CHAT_STREAMS


class WholeChunks(ChatStreamParser):
    _fast = False


def run(parser: ChatStreamParser, body: bytes, size: int) -> tuple[list[str], Parsed, bool]:
    deltas: list[str] = []
    for i in range(0, len(body), size):
        deltas += parser.feed(body[i : i + size])
    return deltas, parser.finish(), parser.done


@pytest.mark.parametrize("name", CHAT_STREAMS)
@pytest.mark.parametrize("size", [1, 7, 64, 512, 1 << 20])
@pytest.mark.parametrize("upstream", [False, True])
def test_fixture_streams_read_the_same_as_whole_chunks(
    name: str, size: int, upstream: bool
) -> None:
    body = (PAYLOADS / name).read_bytes()
    fast = run(ChatStreamParser(reports_upstream=upstream), body, size)
    whole = run(WholeChunks(reports_upstream=upstream), body, size)
    assert fast == whole


def test_plain_deltas_take_the_shortcut() -> None:
    """The benchmark's stream: every text chunk after the first is read for its choices."""
    body = (PAYLOADS / "openai_stream_include_usage_real.sse").read_bytes()
    parser = ChatStreamParser(reports_upstream=False)
    parser.feed(body[: body.index(b"\n\n") + 2])
    assert parser._identified


FIRST = {"id": "gen-1", "model": "m", "provider": "P", "choices": [{"index": 0, "delta": {}}]}
# Chunk fields that may follow the first one: each can matter to the row or not.
FIELDS: dict[str, Any] = {
    "usage": st.sampled_from(
        [None, {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5, "cost": 0.5}]
    ),
    "x_groq": st.sampled_from([{"id": "r"}, {"usage": {"prompt_tokens": 1}}]),
    "error": st.sampled_from([None, "boom", {"message": "overloaded", "code": 502}]),
    "provider": st.sampled_from(["P", "Q", None]),
    "model": st.sampled_from(["m", "other"]),
    "note": st.sampled_from(['"usage":{', '"error"', "choices", '\\"choices\\":[']),
    "choices": st.lists(
        st.fixed_dictionaries(
            {"index": st.integers(0, 2)},
            optional={
                "delta": st.fixed_dictionaries(
                    {},
                    optional={
                        "content": st.one_of(st.none(), st.text(max_size=5)),
                        "role": st.just("assistant"),
                    },
                ),
                "finish_reason": st.sampled_from([None, "stop", "error", ""]),
                "error": st.sampled_from([None, {"message": "mid-stream", "code": 500}]),
            },
        ),
        max_size=2,
    ),
}


@st.composite
def plain_choice(draw: st.DrawFn) -> dict[str, Any]:
    """A first choice shaped like a plain delta's, give or take one field."""
    delta: dict[str, Any] = {"content": draw(st.text(max_size=4))}
    role = draw(st.sampled_from(["", "before", "after"]))
    if role == "before":
        delta = {"role": "assistant", **delta}
    elif role == "after":
        delta["role"] = "assistant"
    choice: dict[str, Any] = {"index": draw(st.integers(0, 1)), "delta": delta}
    for key in draw(st.lists(st.sampled_from(["logprobs", "finish_reason", "error"]))):
        choice[key] = draw(st.sampled_from([None, None, "stop", {"message": "m"}]))
    return choice


@st.composite
def chunks(draw: st.DrawFn) -> str:
    """A chunk of any fields, or (half the time) one shaped like a plain delta."""
    if draw(st.booleans()):
        keys = draw(st.lists(st.sampled_from(["model", "provider"]), unique=True))
        chunk = {key: draw(FIELDS[key]) for key in keys}
        chunk["choices"] = [draw(plain_choice()), *draw(FIELDS["choices"])]
        if draw(st.booleans()):
            chunk["usage"] = draw(st.sampled_from([None, None, {"prompt_tokens": 3}]))
        return json.dumps(chunk, separators=(",", ":"), ensure_ascii=draw(st.booleans()))
    keys = draw(st.lists(st.sampled_from(sorted(FIELDS)), unique=True))
    chunk = {key: draw(FIELDS[key]) for key in keys}
    spaced = draw(st.booleans())
    return json.dumps(chunk, separators=(", ", ": ") if spaced else (",", ":"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(chunks(), max_size=5),
    st.sampled_from(["message", "error"]),
    st.integers(1, 64),
    st.booleans(),
)
def test_any_chunk_after_the_first_reads_the_same(
    events: list[str], last_name: str, size: int, text: bool
) -> None:
    lines = [f"data: {json.dumps(FIRST)}\n\n"] + [f"data: {e}\n\n" for e in events]
    if events:
        lines[-1] = f"event: {last_name}\n{lines[-1]}"
    body = ("".join(lines) + "data: [DONE]\n\n").encode()
    fast = run(ChatStreamParser(reports_upstream=True, text=text), body, size)
    whole = run(WholeChunks(reports_upstream=True, text=text), body, size)
    assert fast == whole
