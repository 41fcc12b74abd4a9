"""The sticky session key: format, injectivity, and deterministic shortening."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.session_key import MAX_KEY_LENGTH, session_key


def test_key_is_prefix_session_and_actor() -> None:
    assert session_key("s-42", "planner") == "ledger:s-42:planner"


def test_key_without_an_actor_has_two_parts() -> None:
    assert session_key("s-42") == "ledger:s-42"
    assert session_key("s-42", "") == "ledger:s-42"


def test_prefix_is_configurable() -> None:
    assert session_key("s", "a", prefix="billing") == "billing:s:a"


def test_colons_inside_parts_cannot_make_two_sessions_share_a_key() -> None:
    assert session_key("a:b", "c") != session_key("a", "b:c")


def test_long_keys_are_shortened_deterministically_with_a_readable_head() -> None:
    sid = "session-" + "x" * 400
    key = session_key(sid, "agent")
    assert len(key) == MAX_KEY_LENGTH
    assert key.startswith("ledger:session-xxx")
    assert key == session_key(sid, "agent")


def test_long_keys_sharing_a_head_do_not_collide() -> None:
    head = "s" * 300
    assert session_key(head + "1", "a") != session_key(head + "2", "a")
    assert session_key(head, "a") != session_key(head, "b")


@given(st.text(min_size=1, max_size=600), st.text(max_size=300), st.text(max_size=300))
def test_keys_always_fit_and_distinct_inputs_give_distinct_keys(
    sid: str, actor: str, other: str
) -> None:
    key = session_key(sid, actor)
    assert len(key) <= MAX_KEY_LENGTH
    if (actor or None) != (other or None):
        assert key != session_key(sid, other)


def test_empty_session_id_is_rejected() -> None:
    with pytest.raises(ValueError):
        session_key("")
