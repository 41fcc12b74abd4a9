"""Translation between the two wire formats, for a chain that crosses them
(an OpenAI-wire client whose fallback is Anthropic, ADR-0014's own chain).

Pure functions over decoded JSON. What translates (both ways where it applies):
text and content-part lists, system/developer messages (``system``), images
(data URLs and https URLs), tools and ``tool_choice``, assistant tool calls and
tool results, ``max_tokens``/``max_completion_tokens``, ``temperature``,
``top_p``, ``stop``, ``user``, streaming. Anything else with a non-default value
raises :class:`Untranslatable` naming the field (the gateway answers 400): a
feature is never dropped silently. Responses and streams are translated back
in :mod:`ledger.gateway.translate_stream` (streams) and here (whole bodies).

Structured output (``response_format`` ``json_schema`` or ``json_object``) goes to
Anthropic the way Anthropic's own documentation does JSON output: one tool whose
``input_schema`` is the schema, forced with ``tool_choice``; that tool's input comes
back as the message's content (JSON text, ``finish_reason: "stop"``), never as a tool
call. It cannot be combined with the request's own ``tools`` (the forced tool would
stop the model from calling them): that is refused, saying so.

The other way (an Anthropic-wire client whose chain reaches an OpenAI-wire
provider) translates the same features; ``cache_control`` marks are dropped there
(OpenAI-style providers cache prefixes by themselves), a ``tool_result`` with
``is_error: true`` becomes a tool message whose text says the tool failed (OpenAI's
tool messages have no error flag; LangChain sets it on every failed tool), earlier
turns' ``thinking`` blocks are dropped (Anthropic strips them from the context itself;
chat completions take no reasoning back), and ``top_k``, ``thinking`` and documents are
refused. A function tool's ``strict`` goes to Anthropic as its own ``strict`` (strict
tool use: inputs that follow the schema).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, Final

from ledger.providers import wire as jsonwire

#: Output tokens asked of Anthropic when an OpenAI-wire request names no limit
#: (Anthropic requires one; OpenAI's default is the model's maximum).
DEFAULT_MAX_TOKENS: Final = 4096

#: OpenAI fields that are no-ops at these values (SDKs send some of them by default).
_DEFAULTS: Final[dict[str, tuple[Any, ...]]] = {
    "n": (1,),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "logprobs": (False,),
    "logit_bias": ({},),
    "parallel_tool_calls": (True,),
    "store": (False,),
    "modalities": (["text"],),
    "response_format": ({"type": "text"},),
}
#: Fields the translation itself reads.
_READ: Final = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "tools",
        "tool_choice",
        "user",
        "parallel_tool_calls",
        "response_format",
    }
)
#: The forced tool's name when a ``json_object`` request (or a schema) names none.
STRUCTURED_TOOL: Final = "json_output"
#: What the forced tool tells the model it is for.
_STRUCTURED_DESCRIPTION: Final = (
    "Give your whole answer by calling this tool: its input is the answer, as JSON."
)
#: The text a failed tool's result starts with on the OpenAI wire (no error flag there).
TOOL_ERROR_PREFIX: Final = "Error: "

FINISH_REASONS: Final = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "pause_turn": "stop",
    "refusal": "content_filter",
}


class Untranslatable(ValueError):
    """The request uses ``feature``, which the other wire format cannot express."""

    def __init__(self, feature: str, target: str) -> None:
        super().__init__(
            f"this model's route chain crosses to {target}, which cannot express "
            f"'{feature}'; remove it or call a model whose routes share the wire format"
        )
        self.feature = feature


# -- OpenAI chat request -> Anthropic messages request ----------------------------------


def chat_to_messages(body: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The Anthropic request for an OpenAI chat-completions ``body``, asking ``model``."""
    for name, value in body.items():
        if name in _READ or value is None or value in _DEFAULTS.get(name, ()):
            continue
        raise Untranslatable(name, "Anthropic messages")
    system, messages = _messages(body["messages"])
    out: dict[str, Any] = {"model": model, "messages": messages}
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    out["max_tokens"] = limit if isinstance(limit, int) else DEFAULT_MAX_TOKENS
    if system:
        out["system"] = system
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            out[name] = body[name]
    stop = body.get("stop")
    if stop is not None:
        out["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if body.get("stream") is True:
        out["stream"] = True
    if isinstance(body.get("user"), str):
        out["metadata"] = {"user_id": body["user"]}
    if body.get("tools"):
        out["tools"] = [_tool(t, i) for i, t in enumerate(body["tools"])]
    choice = _tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))
    if choice is not None:
        out["tool_choice"] = choice
    structured = _structured_tool(body)
    if structured is not None:
        out["tools"] = [structured]
        out["tool_choice"] = {"type": "tool", "name": structured["name"]}
    return out


def structured_output_tool(body: Mapping[str, Any]) -> str | None:
    """The name of the forced tool carrying an OpenAI-wire request's structured output
    (None: the request asks for text), for reading the answer back."""
    fmt = body.get("response_format")
    if not isinstance(fmt, dict) or fmt.get("type") not in ("json_schema", "json_object"):
        return None
    spec = fmt.get("json_schema")
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) and name else STRUCTURED_TOOL


def _structured_tool(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The forced tool expressing ``response_format`` (None: plain text is asked)."""
    fmt = body.get("response_format")
    if fmt is None or fmt in _DEFAULTS["response_format"]:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind not in ("json_schema", "json_object"):
        raise Untranslatable(f"response_format of type {kind!r}", "Anthropic messages")
    if body.get("tools") or body.get("tool_choice") not in (None, "auto", "none"):
        raise Untranslatable(
            "response_format together with tools (Anthropic expresses structured output "
            "as a forced tool call, which would keep the model from calling yours)",
            "Anthropic messages",
        )
    schema: Any = {"type": "object"}
    description = _STRUCTURED_DESCRIPTION
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise Untranslatable(
                "response_format.json_schema.schema whose root is not an object "
                "(Anthropic's tool input must be a JSON object)",
                "Anthropic messages",
            )
        assert isinstance(spec, dict)
        if isinstance(spec.get("description"), str) and spec["description"]:
            description = f"{spec['description']} {description}"
    name = structured_output_tool(body)
    return {"name": name, "description": description, "input_schema": schema}


def _text_parts(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        if content is None:
            return []
        raise Untranslatable(f"{where}.content of type {type(content).__name__}", "Anthropic")
    blocks = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            blocks.append({"type": "text", "text": part.get("text", "")})
        elif kind == "image_url":
            blocks.append(_image(part.get("image_url"), f"{where}.content[{j}]"))
        else:
            raise Untranslatable(f"{where}.content[{j}] of type {kind!r}", "Anthropic messages")
    return blocks


def _image(value: Any, where: str) -> dict[str, Any]:
    url = value.get("url") if isinstance(value, dict) else value
    if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
        media, _, data = url[5:].partition(";base64,")
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    if isinstance(url, str) and url.startswith(("https://", "http://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise Untranslatable(f"{where} (an image that is not a data or http(s) URL)", "Anthropic")


def _flat(blocks: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if all(b["type"] == "text" for b in blocks):
        return "".join(b["text"] for b in blocks)
    return blocks


def _messages(raw: list[Any]) -> tuple[str | list[dict[str, Any]], list[dict[str, Any]]]:
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise Untranslatable(f"{where} (not an object)", "Anthropic")
        role = message.get("role")
        for name in message:
            if name not in ("role", "content", "name", "tool_calls", "tool_call_id", "refusal"):
                raise Untranslatable(f"{where}.{name}", "Anthropic messages")
        if role in ("system", "developer"):
            system.extend(_text_parts(message.get("content"), where))
        elif role == "user":
            _append(out, "user", _text_parts(message.get("content"), where))
        elif role == "assistant":
            blocks = _text_parts(message.get("content"), where)
            for call in message.get("tool_calls") or []:
                blocks.append(_tool_use(call, where))
            _append(out, "assistant", blocks)
        elif role == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": message.get("tool_call_id"),
                "content": _flat(_text_parts(message.get("content"), where)),
            }
            _append(out, "user", [result])
        else:
            raise Untranslatable(f"{where}.role {role!r}", "Anthropic messages")
    return _flat(system) if system else "", out


def _append(out: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    # Anthropic wants turns to alternate: tool results following each other (one per call
    # of the previous assistant turn) belong in one user message.
    if out and out[-1]["role"] == role:
        previous = out[-1]["content"]
        if isinstance(previous, str):
            previous = [{"type": "text", "text": previous}] if previous else []
        out[-1]["content"] = previous + blocks
        return
    out.append({"role": role, "content": _flat(blocks) if role == "user" else blocks})


def _tool_use(call: Any, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or call.get("type", "function") != "function":
        raise Untranslatable(f"{where}.tool_calls (a non-function tool call)", "Anthropic")
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except ValueError:
        raise Untranslatable(
            f"{where}.tool_calls arguments that are not JSON", "Anthropic"
        ) from None
    return {
        "type": "tool_use",
        "id": call.get("id"),
        "name": function.get("name"),
        "input": arguments,
    }


def _tool(tool: Any, i: int) -> dict[str, Any]:
    function = tool.get("function") if isinstance(tool, dict) else None
    if not isinstance(function, dict) or tool.get("type") != "function":
        raise Untranslatable(f"tools[{i}] (a non-function tool)", "Anthropic messages")
    out = {
        "name": function.get("name"),
        "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
    }
    if function.get("description"):
        out["description"] = function["description"]
    if function.get("strict"):
        out["strict"] = True  # Anthropic's strict tool use: inputs that follow the schema
    return out


def _tool_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    if choice is None and parallel is not False:
        return None
    if choice is None or choice == "auto":
        out: dict[str, Any] = {"type": "auto"}
    elif choice == "none":
        out = {"type": "none"}
    elif choice == "required":
        out = {"type": "any"}
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        out = {"type": "tool", "name": choice["function"].get("name")}
    else:
        raise Untranslatable(f"tool_choice {choice!r}", "Anthropic messages")
    if parallel is False and out["type"] != "none":
        out["disable_parallel_tool_use"] = True
    return out


# -- Anthropic messages response -> OpenAI chat completion ------------------------------


def openai_usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI ``usage`` object for an Anthropic one (reads and writes inside the prompt)."""
    uncached = jsonwire.count(usage.get("input_tokens")) or 0
    read = jsonwire.count(usage.get("cache_read_input_tokens")) or 0
    write = jsonwire.count(usage.get("cache_creation_input_tokens")) or 0
    output = jsonwire.count(usage.get("output_tokens")) or 0
    prompt = uncached + read + write
    return {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt + output,
        "prompt_tokens_details": {"cached_tokens": read},
    }


def message_to_chat(data: Mapping[str, Any], structured: str | None = None) -> dict[str, Any]:
    """The OpenAI chat completion for a whole Anthropic message body; ``structured``: the
    forced tool whose input is the answer's content (:func:`structured_output_tool`)."""
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in data.get("content") or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            text.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use" and structured and block.get("name") == structured:
            text = [json.dumps(block.get("input", {}), ensure_ascii=False)]
        elif block.get("type") == "tool_use":
            calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {
                        "name": block.get("name"),
                        "arguments": json.dumps(block.get("input", {}), ensure_ascii=False),
                    },
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text else None}
    if calls:
        message["tool_calls"] = calls
    stop = data.get("stop_reason")
    finish = FINISH_REASONS.get(str(stop), "stop")
    if structured and not calls and finish == "tool_calls":
        finish = "stop"  # the forced tool was the answer, not a call for the client
    return {
        "id": data.get("id"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": data.get("model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish,
                "logprobs": None,
            }
        ],
        "usage": openai_usage(jsonwire.obj(data.get("usage"))),
    }


# -- Anthropic messages request -> OpenAI chat request ----------------------------------

_MESSAGES_READ: Final = frozenset(
    {
        "model",
        "messages",
        "system",
        "max_tokens",
        "temperature",
        "top_p",
        "stop_sequences",
        "stream",
        "metadata",
        "tools",
        "tool_choice",
    }
)
STOP_REASONS: Final = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


def messages_to_chat(
    body: Mapping[str, Any], model: str, max_tokens_field: str = "max_tokens"
) -> dict[str, Any]:
    """The OpenAI chat request for an Anthropic messages ``body``, asking ``model``.

    ``cache_control`` marks are dropped: they are hints for Anthropic's explicit
    prompt cache, and OpenAI-style providers cache prefixes by themselves (the
    answer is the same; the README says so).
    """
    for name, value in body.items():
        if name not in _MESSAGES_READ and value is not None:
            raise Untranslatable(name, "OpenAI chat completions")
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": _chat_text(system, "system")})
    for i, message in enumerate(body["messages"]):
        messages.extend(_chat_messages(message, f"messages[{i}]"))
    out: dict[str, Any] = {"model": model, "messages": messages}
    if isinstance(body.get("max_tokens"), int):
        out[max_tokens_field] = body["max_tokens"]
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            out[name] = body[name]
    if body.get("stop_sequences"):
        out["stop"] = list(body["stop_sequences"])
    if body.get("stream") is True:
        out["stream"] = True
    user = jsonwire.obj(body.get("metadata")).get("user_id")
    if isinstance(user, str):
        out["user"] = user
    if body.get("tools"):
        out["tools"] = [_chat_tool(t, i) for i, t in enumerate(body["tools"])]
    if body.get("tool_choice") is not None:
        out.update(_chat_tool_choice(body["tool_choice"]))
    return out


def _chat_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for j, block in enumerate(content if isinstance(content, list) else [content]):
        if not isinstance(block, dict) or block.get("type") != "text":
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise Untranslatable(f"{where}[{j}] of type {kind!r}", "OpenAI chat completions")
        parts.append(str(block.get("text", "")))
    return "".join(parts)


def _chat_part(block: Any, where: str) -> dict[str, Any]:
    kind = block.get("type") if isinstance(block, dict) else None
    if kind == "text":
        return {"type": "text", "text": block.get("text", "")}
    if kind == "image":
        source = jsonwire.obj(block.get("source"))
        if source.get("type") == "base64":
            url = f"data:{source.get('media_type')};base64,{source.get('data')}"
            return {"type": "image_url", "image_url": {"url": url}}
        if source.get("type") == "url":
            return {"type": "image_url", "image_url": {"url": source.get("url")}}
    raise Untranslatable(f"{where} of type {kind!r}", "OpenAI chat completions")


def _chat_messages(message: Any, where: str) -> list[dict[str, Any]]:
    role = message.get("role") if isinstance(message, dict) else None
    if role not in ("user", "assistant"):
        raise Untranslatable(f"{where}.role {role!r}", "OpenAI chat completions")
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for j, block in enumerate(content or []):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_use" and role == "assistant":
            arguments = json.dumps(block.get("input", {}), ensure_ascii=False)
            function = {"name": block.get("name"), "arguments": arguments}
            calls.append({"id": block.get("id"), "type": "function", "function": function})
        elif kind in ("thinking", "redacted_thinking") and role == "assistant":
            # Dropped: Anthropic itself strips earlier turns' thinking from the context,
            # and chat completions take no reasoning back.
            continue
        elif kind == "tool_result" and role == "user":
            text = _chat_text(block.get("content") or "", f"{where}.content[{j}].content")
            if block.get("is_error") and not text.lower().startswith("error"):
                text = TOOL_ERROR_PREFIX + text
            results.append(
                {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": text}
            )
        else:
            parts.append(_chat_part(block, f"{where}.content[{j}]"))
    out: list[dict[str, Any]] = list(results)
    if role == "assistant":
        text = "".join(p["text"] for p in parts if p["type"] == "text")
        assistant: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            assistant["tool_calls"] = calls
        out.append(assistant)
    elif parts:
        out.append({"role": "user", "content": parts})
    return out


def _chat_tool(tool: Any, i: int) -> dict[str, Any]:
    if not isinstance(tool, dict) or tool.get("type") not in (None, "custom"):
        kind = tool.get("type") if isinstance(tool, dict) else None
        raise Untranslatable(f"tools[{i}] of type {kind!r}", "OpenAI chat completions")
    function = {"name": tool.get("name"), "parameters": tool.get("input_schema") or {}}
    if tool.get("description"):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _chat_tool_choice(choice: Any) -> dict[str, Any]:
    kind = choice.get("type") if isinstance(choice, dict) else None
    mapped: dict[str, Any]
    if kind == "auto":
        mapped = {"tool_choice": "auto"}
    elif kind == "any":
        mapped = {"tool_choice": "required"}
    elif kind == "none":
        mapped = {"tool_choice": "none"}
    elif kind == "tool":
        mapped = {"tool_choice": {"type": "function", "function": {"name": choice.get("name")}}}
    else:
        raise Untranslatable(f"tool_choice {choice!r}", "OpenAI chat completions")
    if choice.get("disable_parallel_tool_use"):
        mapped["parallel_tool_calls"] = False
    return mapped


# -- OpenAI chat completion -> Anthropic message ----------------------------------------


def anthropic_usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    """An Anthropic ``usage`` object for an OpenAI one (cache reads outside the input)."""
    prompt = jsonwire.count(usage.get("prompt_tokens")) or 0
    details = jsonwire.obj(usage.get("prompt_tokens_details"))
    read = jsonwire.count(details.get("cached_tokens")) or 0
    write = jsonwire.count(details.get("cache_write_tokens")) or 0
    return {
        "input_tokens": max(prompt - read - write, 0),
        "output_tokens": jsonwire.count(usage.get("completion_tokens")) or 0,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": write,
    }


def chat_to_message(data: Mapping[str, Any]) -> dict[str, Any]:
    """The Anthropic message for a whole OpenAI chat completion."""
    choices = data.get("choices") or [{}]
    choice = jsonwire.obj(choices[0])
    message = jsonwire.obj(choice.get("message"))
    content: list[dict[str, Any]] = []
    if isinstance(message.get("content"), str) and message["content"]:
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = jsonwire.obj(jsonwire.obj(call).get("function"))
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            arguments = {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id"),
                "name": function.get("name"),
                "input": arguments,
            }
        )
    finish = str(choice.get("finish_reason"))
    return {
        "id": data.get("id"),
        "type": "message",
        "role": "assistant",
        "model": data.get("model"),
        "content": content,
        "stop_reason": STOP_REASONS.get(finish, "end_turn"),
        "stop_sequence": None,
        "usage": anthropic_usage(jsonwire.obj(data.get("usage"))),
    }
