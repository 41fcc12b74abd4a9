"""Tool calls and JSON answers: what a request's tools and output format ask the model for.

The simulator has no model, so it answers by a fixed, documented policy that gives
agent loops and structured-output parsers something real to read:

* **A tool call** when the request offers tools and does not forbid them
  (``tool_choice`` none): the named tool when one is forced; else the first tool
  whose name the last user text mentions, else the first tool. With ``tool_choice``
  auto, a request whose last message carries a tool's result gets text instead, so
  a loop of call, result, answer ends.
* **A JSON document** matching the requested schema (OpenAI ``response_format``
  json_schema, Anthropic ``output_config.format``), or for JSON mode (json_object)
  an object whose keys are the names quoted in the last user text
  (``'setup' and 'punchline' keys``), else ``{"answer": …}``; so is any object schema
  that declares no properties (``{"type": "object"}``).

Values for a schema come from the last user text when it holds one of the right kind
(a model copies what it was given): a string is the first quoted phrase (``'你好'``,
``"Acme"``), an integer or number the first number; otherwise filler words, 0, true,
the first enum value. Objects carry their required properties (all of them when none
are named required); arrays one item.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

_QUOTED: Final = re.compile(r"'([^'\n]{1,200})'|\"([^\"\n]{1,200})\"|“([^”\n]{1,200})”")
_NUMBER: Final = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
_FILLER: Final = ("simulated", "value", "from", "the", "ledger", "simulator")
#: How deep a schema is followed before a nested value is left empty (a cycle's guard).
_MAX_DEPTH: Final = 8


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool the request offers: its name and its parameters' JSON schema."""

    name: str
    schema: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Wanted:
    """What a request asks the answer to be, read from its wire format.

    ``tool_choice``: "auto", "required" (any tool), "none", or a tool's name.
    ``json_schema``: the schema of a structured-output request; ``json_mode``: any
    JSON object. ``after_tool_result``: the last message carries a tool's result.
    ``user_text``: the last user message's text, where argument values come from.
    """

    tools: tuple[Tool, ...] = ()
    tool_choice: str = "auto"
    json_schema: Mapping[str, Any] | None = None
    json_mode: bool = False
    after_tool_result: bool = False
    user_text: str = ""

    @property
    def plain(self) -> bool:
        """Nothing but text is asked for."""
        return not self.tools and self.json_schema is None and not self.json_mode


@dataclass(frozen=True, slots=True)
class Shaped:
    """The answer the policy chose: a tool call (``tool`` and its JSON ``text``), or a
    JSON document (``tool`` None)."""

    text: str
    tool: str | None = None


def shape(wanted: Wanted) -> Shaped | None:
    """The answer ``wanted`` calls for (None: free text); see the module docstring."""
    tool = _chosen_tool(wanted)
    if tool is not None:
        return Shaped(_dumps(instance(tool.schema, wanted.user_text)), tool.name)
    if wanted.json_schema is not None:
        return Shaped(_dumps(instance(wanted.json_schema, wanted.user_text)))
    if wanted.json_mode:
        found = instance({"type": "object"}, wanted.user_text)
        return Shaped(_dumps(found or {"answer": " ".join(_FILLER)}))
    return None


def _chosen_tool(wanted: Wanted) -> Tool | None:
    if not wanted.tools or wanted.tool_choice == "none":
        return None
    for tool in wanted.tools:
        if tool.name == wanted.tool_choice:
            return tool
    if wanted.tool_choice == "auto" and wanted.after_tool_result:
        return None
    mentioned = [t for t in wanted.tools if t.name in wanted.user_text]
    return (mentioned or list(wanted.tools))[0]


def quoted(text: str) -> list[str]:
    """The quoted phrases of ``text``, in order."""
    return [next(g for g in match.groups() if g is not None) for match in _QUOTED.finditer(text)]


def instance(schema: Mapping[str, Any], text: str, depth: int = 0) -> Any:
    """A value valid for the JSON ``schema`` (the subset tool and output schemas use:
    type, properties, required, items, enum, const, anyOf/oneOf, $ref to $defs)."""
    return _Builder(schema, text).build(schema, depth)


class _Builder:
    def __init__(self, root: Mapping[str, Any], text: str) -> None:
        self.root = root
        self.text = text

    def build(self, schema: Any, depth: int) -> Any:
        if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
            return None
        schema = self._resolve(schema)
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return schema["enum"][0]
        for key in ("anyOf", "oneOf", "allOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                typed = [o for o in options if self._resolve(o).get("type") != "null"]
                return self.build((typed or options)[0], depth + 1)
        kind = schema.get("type", "object" if "properties" in schema else "string")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        return self._typed(kind, schema, depth)

    def _typed(self, kind: str, schema: Mapping[str, Any], depth: int) -> Any:
        if kind == "object":
            properties = schema.get("properties")
            if not isinstance(properties, Mapping):  # any object: the keys the user quoted
                return {key: " ".join(_FILLER) for key in quoted(self.text)}
            required = schema.get("required")
            names = required if isinstance(required, list) and required else list(properties)
            return {n: self.build(properties.get(n, {}), depth + 1) for n in names}
        if kind == "array":
            return [self.build(schema.get("items", {}), depth + 1)]
        if kind in ("integer", "number"):
            return self._number(kind == "integer")
        if kind == "boolean":
            return True
        if kind == "null":
            return None
        found = quoted(self.text)
        return found[0] if found else " ".join(_FILLER)

    def _number(self, integer: bool) -> int | float:
        for match in _NUMBER.finditer(self.text):
            value = float(match.group())
            if not integer:
                return value
            if value.is_integer():
                return int(value)
        return 0

    def _resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return schema
        target: Any = self.root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        return target if isinstance(target, Mapping) else {}


def _dumps(value: Any) -> str:
    # ensure_ascii=False: a model writes "你好", not "\\u4f60\\u597d".
    return json.dumps(value, ensure_ascii=False)


def pieces_of(text: str, rng: random.Random, *, size: int = 12) -> tuple[str, ...]:
    """``text`` cut into stream fragments of about ``size`` characters (a JSON document
    arrives in pieces that split its tokens anywhere, as real streams do)."""
    out: list[str] = []
    at = 0
    while at < len(text):
        step = max(1, size + rng.randint(-size // 3, size // 3))
        out.append(text[at : at + step])
        at += step
    return tuple(out) or ("",)


def last_user_text(messages: Sequence[Any]) -> str:
    """The text of the last user message (string content, or its text parts)."""
    for message in reversed(messages):
        if not isinstance(message, Mapping) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            parts = [p.get("text") for p in content if isinstance(p, Mapping)]
            texts = [p for p in parts if isinstance(p, str)]
            if texts:
                return "\n".join(texts)
    return ""
