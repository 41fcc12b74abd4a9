"""Compact JSON text (``separators=(",", ":")``, ``ensure_ascii=False``) on the hot path.

``json.JSONEncoder.encode`` builds json's C encoder anew on every call (a float
formatter, attribute reads, cycle markers), which costs about as much as encoding
a request body, a row or a tags dict. :func:`compact_encoder` builds it once. The
text is the same as ``JSONEncoder.encode``'s with the same settings.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def compact_encoder(
    *, allow_nan: bool = True, check_circular: bool = False
) -> Callable[[Any], str]:
    """An ``encode(value) -> str`` like ``JSONEncoder(ensure_ascii=False, separators=(",",
    ":"), allow_nan=..., check_circular=...).encode``.

    Without ``check_circular`` a value holding a cycle recurses until RecursionError:
    only for values built by our own code (rows, checked tags). With it, each call gets
    fresh cycle markers and a cycle is ``ValueError: Circular reference detected``.
    """
    reference = json.JSONEncoder(
        ensure_ascii=False,
        separators=(",", ":"),
        allow_nan=allow_nan,
        check_circular=check_circular,
    )
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator (another interpreter)
        return reference.encode
    default, text = reference.default, json.encoder.encode_basestring
    # (markers, default, encoder, indent, key and item separators, sort_keys, skipkeys,
    # allow_nan), as JSONEncoder.iterencode passes them
    if check_circular:

        def encode_checked(value: Any) -> str:
            iterencode = make({}, default, text, None, ":", ",", False, False, allow_nan)
            return "".join(iterencode(value, 0))

        return encode_checked
    iterencode = make(None, default, text, None, ":", ",", False, False, allow_nan)

    def encode(value: Any) -> str:
        return "".join(iterencode(value, 0))

    return encode
