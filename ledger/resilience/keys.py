"""The response cache's key: a normalised ``(text, locale, model)`` tuple.

Two requests share a cached answer only when a reader would call them the same
request. The rules lean towards a miss: serving one visitor's answer to a
different question is a wrong answer, while a needless miss only costs one
provider call.

- **text**: Unicode NFC (a precomposed "é" and "e" + combining accent are the
  same text to every reader, but different code points and bytes); line
  endings ``\\r\\n`` and ``\\r`` become ``\\n`` (the same text pasted on another
  OS); trailing whitespace of each line and leading/trailing blank space of the
  whole text are dropped (invisible, and forms add them freely). Interior
  whitespace is kept (indentation and alignment carry meaning in code and
  tables) and so is case ("US" vs "us", identifiers, acronyms).
- **locale**: BCP 47 tags are case-insensitive (RFC 5646 §2.1.1), so the tag is
  recased canonically (``pt_br`` and ``PT-br`` become ``pt-BR``: language lower,
  four-letter script title, two-letter or three-digit region upper) with ``_``
  read as ``-``; no locale is the empty string.
- **model**: stripped of surrounding whitespace only. Model ids are opaque to
  us and providers treat them case-sensitively.

The stored key is a SHA-256 digest of the normalised tuple, so neither Redis
keys nor logs ever hold prompt text.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Final

#: Bumped whenever a rule above changes, so old entries can never be hit.
KEY_VERSION: Final = "v1"

_LINE_BREAKS: Final = re.compile(r"\r\n?")
_TRAILING_SPACE: Final = re.compile(r"[^\S\n]+$", re.MULTILINE)


def normalise_text(text: str) -> str:
    """``text`` with the module docstring's rules applied."""
    text = unicodedata.normalize("NFC", text)
    text = _LINE_BREAKS.sub("\n", text)
    return _TRAILING_SPACE.sub("", text).strip()


def normalise_locale(locale: str | None) -> str:
    """A BCP 47 tag in canonical case (``zh_hant_tw`` -> ``zh-Hant-TW``); None -> ``""``."""
    if not locale or not locale.strip():
        return ""
    parts = locale.strip().replace("_", "-").split("-")
    out = [parts[0].lower()]
    for part in parts[1:]:
        if len(part) == 4 and part.isalpha():
            out.append(part.title())
        elif (len(part) == 2 and part.isalpha()) or (len(part) == 3 and part.isdigit()):
            out.append(part.upper())
        else:
            out.append(part.lower())
    return "-".join(out)


def normalise_model(model: str) -> str:
    """The model id without surrounding whitespace."""
    return model.strip()


def cache_key(text: str, locale: str | None, model: str) -> str:
    """The hex digest under which the answer to this request is cached."""
    parts = (KEY_VERSION, normalise_text(text), normalise_locale(locale), normalise_model(model))
    # Length-prefixed framing: no two different tuples frame to the same string.
    framed = "".join(f"{len(p)}:{p}" for p in parts)
    return hashlib.sha256(framed.encode("utf-8", "surrogatepass")).hexdigest()
