"""ledger.compact_json writes the text JSONEncoder writes, and keeps its refusals."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from ledger.compact_json import compact_encoder

VALUES: list[Any] = [
    ("call", 1, 2.5, None, True, 'naïve ✓ \x1b[31m "quoted"'),
    {"team": "search", "n": 10**30, "nested": {"a": [1, 0.1, -0.0]}},
    "plain",
    [],
    {},
]


@pytest.mark.parametrize("check_circular", [False, True])
@pytest.mark.parametrize("value", VALUES)
def test_the_text_is_json_encoders(value: Any, check_circular: bool) -> None:
    reference = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
    assert compact_encoder(check_circular=check_circular)(value) == reference.encode(value)


def test_nan_is_refused_when_asked() -> None:
    assert compact_encoder()([math.nan]) == "[NaN]"
    with pytest.raises(ValueError, match="not JSON compliant"):
        compact_encoder(allow_nan=False)({"x": math.inf})


def test_a_cycle_is_a_value_error_when_checked() -> None:
    body: dict[str, Any] = {}
    body["self"] = body
    encode = compact_encoder(check_circular=True)
    with pytest.raises(ValueError, match="Circular reference"):
        encode(body)
    assert encode({"fine": 1}) == '{"fine":1}'  # the markers are fresh for each call


def test_an_unknown_type_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        compact_encoder()([object()])
