"""Ledger strings shown to people: characters that would act instead of show, escaped.

Strings in the ledger (an agent id, an upstream name, a model) come from callers
and providers: data, never instructions to a terminal or a browser. Two kinds of
character would act on whoever shows them:

* C0 and C1 controls and DEL: an ESC sequence clears or restyles a terminal, a
  BEL rings it, a CR moves back over what was printed;
* bidirectional formatting (:data:`BIDI`): U+202E RIGHT-TO-LEFT OVERRIDE shows
  ``\\u202eAmazon Bedrock`` as "kcordeB nozamA", and an override or isolate left
  open reorders the rest of the line, the columns after it included (the
  "Trojan Source" trick). The line and paragraph separators U+2028/U+2029 break a
  line in some viewers, so a cell is no longer one line.

Each is shown as its escape: ``\\x1b`` for a control, ``\\u202e`` above U+00FF,
so a person sees that something is there and what. Only these are escaped: any
other text (accents, CJK, Arabic and Hebrew letters, emoji with their joiners) is
shown as written. The CLI (:mod:`ledger.cli.tables`) and the dashboard
(``dashboards.fmt``) build their patterns from these.
"""

from __future__ import annotations

import re
from typing import Final

#: Bidirectional formatting characters, as a regex class body: the Arabic letter
#: mark, the left-to-right and right-to-left marks, the embeddings and overrides
#: (LRE, RLE, PDF, LRO, RLO) and the isolates (LRI, RLI, FSI, PDI).
BIDI: Final = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
#: Line and paragraph separators: line breaks to some viewers, invisible to others.
SEPARATORS: Final = "\u2028\u2029"
#: C0 controls but tab and line feed (each caller decides about those two), DEL, C1.
CONTROLS: Final = "\x00-\x08\x0b-\x1f\x7f-\x9f"

#: Everything that is escaped wherever ledger text is shown, but tab and line feed.
_UNSAFE: Final = re.compile(f"[{CONTROLS}{BIDI}{SEPARATORS}]")


def unsafe_pattern(*, tab: bool, newline: bool) -> re.Pattern[str]:
    """The characters to escape; ``tab``/``newline`` True escapes those too."""
    extra = ("\t" if tab else "") + ("\n" if newline else "")
    return re.compile(f"[{CONTROLS}{extra}{BIDI}{SEPARATORS}]")


def escape(match: re.Match[str]) -> str:
    """One matched character as it is shown: ``\\x1b``, or ``\\u202e`` above U+00FF."""
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


_LINE: Final = unsafe_pattern(tab=True, newline=True)
_LINES: Final = unsafe_pattern(tab=True, newline=False)


def one_line(value: object) -> str:
    """``value`` as one printable line (a table cell, a label): every such character
    escaped, tab and line feed included."""
    return _LINE.sub(escape, str(value))


def lines(text: str) -> str:
    """``text`` printable over many lines (a message, CSV on a terminal): every such
    character escaped but the line feed."""
    return _LINES.sub(escape, text)


def json_escaped(dumped: str) -> str:
    """JSON text (from ``json.dumps(..., ensure_ascii=False)``) with DEL, the C1
    controls, the bidi characters and the separators written as ``\\u`` escapes.

    Still valid JSON that parses to the same strings (outside strings, JSON text is
    ASCII, so every match is inside one); json itself escapes the C0 controls."""
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", dumped)
