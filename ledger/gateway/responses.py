"""OpenAI's Responses API (``POST /v1/responses``) served through chat completions.

The gateway's routes speak chat completions or Anthropic messages, so a Responses
request is re-told as a chat-completions request (:func:`to_chat`), which then goes
down the chain like any OpenAI-wire call (to Anthropic routes through the usual
chat→messages translation), is metered and recorded like chat, and its answer is
re-told as a Responses object (:func:`chat_to_response`; streams in
:mod:`ledger.gateway.responses_stream`).

What translates: ``input`` (a string, or message items with ``input_text``/
``output_text``/``input_image`` parts, ``function_call`` and ``function_call_output``
items), ``instructions`` (a system message), function ``tools`` and ``tool_choice``,
``parallel_tool_calls``, ``text.format`` (json_object, json_schema) and
``text.verbosity``, ``reasoning.effort``, ``max_output_tokens``, ``temperature``,
``top_p``, ``user``/``safety_identifier``, ``prompt_cache_key``, ``service_tier``,
streaming. ``reasoning`` items in ``input`` are dropped (chat completions take no
reasoning back; the model reasons afresh), as are ``include``, ``metadata``,
``truncation``, ``store`` and ``stream_options``, which ask for nothing a chat
completion can give: the answer says ``store: false``, since the gateway keeps no
responses.

Refused with a 400 that says what to change (:class:`Untranslatable`): state kept by
OpenAI (``previous_response_id``, ``conversation``: send the whole history in
``input``), ``background``, stored ``prompt`` templates, built-in tools
(``web_search``, ``file_search``, ``computer_use``, ``code_interpreter``, ``mcp``, …:
they run inside OpenAI's Responses API only), input files and audio, and any field
this module does not know.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping
from typing import Any, Final


class Untranslatable(ValueError):
    """The Responses request asks for something chat completions cannot express; the
    message says what to change (the gateway answers 400)."""


#: Fields copied to the chat request under the same name.
_SAME: Final = ("temperature", "top_p", "prompt_cache_key", "service_tier")
#: Fields that ask for nothing a chat completion can give, dropped (see the docstring).
_DROPPED: Final = frozenset({"include", "metadata", "truncation", "store", "stream_options"})
#: Fields that need state or tools only OpenAI's Responses API has, and what to do instead.
_REFUSED: Final[dict[str, str]] = {
    "previous_response_id": "the gateway keeps no responses: send the whole history in 'input'",
    "conversation": "the gateway keeps no conversations: send the whole history in 'input'",
    "background": "background responses are not served: call without 'background'",
    "prompt": "stored prompt templates are not served: send the prompt's text in 'input'",
}
_READ: Final = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "text",
        "reasoning",
        "max_output_tokens",
        "stream",
        "parallel_tool_calls",
        "user",
        "safety_identifier",
        *_SAME,
    }
)


def to_chat(body: Mapping[str, Any]) -> dict[str, Any]:
    """The chat-completions request for a Responses request (see the module docstring)."""
    for name, value in body.items():
        if name in _REFUSED and value not in (None, False):
            raise Untranslatable(f"'{name}' cannot be served by this gateway: {_REFUSED[name]}")
        if name not in _READ and name not in _DROPPED and name not in _REFUSED:
            raise Untranslatable(f"'{name}' is not a Responses API field this gateway serves")
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions:
        if not isinstance(instructions, str):
            raise Untranslatable("'instructions' must be a string")
        messages.append({"role": "system", "content": instructions})
    messages += _input_messages(body.get("input"))
    chat: dict[str, Any] = {"model": body["model"], "messages": messages}
    for name in _SAME:
        if body.get(name) is not None:
            chat[name] = body[name]
    if body.get("max_output_tokens") is not None:
        chat["max_completion_tokens"] = body["max_output_tokens"]
    user = body.get("safety_identifier") or body.get("user")
    if user is not None:
        chat["user"] = user
    if body.get("tools"):
        chat["tools"] = [_tool(t, i) for i, t in enumerate(body["tools"])]
        if body.get("parallel_tool_calls") is not None:  # chat takes it with tools only
            chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    chat |= _text(body.get("text"))
    effort = body.get("reasoning") or {}
    if isinstance(effort, dict) and effort.get("effort") is not None:
        chat["reasoning_effort"] = effort["effort"]
    if body.get("stream") is True:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}  # response.completed carries usage
    return chat


def _input_messages(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise Untranslatable("'input' must be a string or a non-empty array of items")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise Untranslatable(f"{where} must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            out.append({"role": _role(item, where), "content": _content(item, where)})
        elif kind == "function_call":
            _add_call(out, item, where)
        elif kind == "function_call_output":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": _output_text(item.get("output"), where),
                }
            )
        elif kind != "reasoning":
            raise Untranslatable(
                f"{where} is a {kind!r} item, which only OpenAI's Responses API holds "
                "(message, function_call, function_call_output and reasoning items are served)"
            )
    return out


def _role(item: Mapping[str, Any], where: str) -> str:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        raise Untranslatable(f"{where}.role must be user, assistant, system or developer")
    return str(role)


def _content(item: Mapping[str, Any], where: str) -> Any:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise Untranslatable(f"{where}.content must be a string or an array of parts")
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text") and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal", ""))})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            image: dict[str, Any] = {"url": part["image_url"]}
            if part.get("detail") is not None:
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise Untranslatable(
                f"{where}.content[{j}] of type {kind!r} is not served (text and image URLs are; "
                "send files by their text, images as an image_url)"
            )
    if item.get("role") == "assistant" and all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)  # assistant content is text in chat
    return parts


def _add_call(out: list[dict[str, Any]], item: Mapping[str, Any], where: str) -> None:
    """A ``function_call`` item joins the assistant message before it (one chat message
    holds a turn's parallel calls), else starts one."""
    name, arguments = item.get("name"), item.get("arguments", "")
    if not isinstance(name, str) or not isinstance(arguments, str):
        raise Untranslatable(f"{where} needs a string 'name' and 'arguments'")
    call = {
        "id": item.get("call_id"),
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }
    last = out[-1] if out else None
    if last is not None and last["role"] == "assistant" and "tool_calls" in last:
        last["tool_calls"].append(call)
    elif last is not None and last["role"] == "assistant" and isinstance(last["content"], str):
        last["tool_calls"] = [call]
    else:
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _output_text(output: Any, where: str) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        texts = [p.get("text") for p in output if isinstance(p, dict)]
        if all(isinstance(t, str) for t in texts):
            return "".join(t for t in texts if isinstance(t, str))
    raise Untranslatable(f"{where}.output must be a string or text parts")


def _tool(tool: Any, i: int) -> dict[str, Any]:
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind != "function":
        raise Untranslatable(
            f"tools[{i}] is the built-in tool {kind!r}, which runs inside OpenAI's Responses "
            "API only; this gateway serves function tools"
        )
    function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool}
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    raise Untranslatable("tool_choice must be auto, none, required or a function tool")


def _text(text: Any) -> dict[str, Any]:
    if not isinstance(text, dict):
        return {}
    out: dict[str, Any] = {}
    if text.get("verbosity") is not None:
        out["verbosity"] = text["verbosity"]
    fmt = text.get("format")
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "json_object":
        out["response_format"] = {"type": "json_object"}
    elif kind == "json_schema" and isinstance(fmt, dict):
        spec = {k: fmt[k] for k in ("name", "description", "schema", "strict") if k in fmt}
        out["response_format"] = {"type": "json_schema", "json_schema": spec}
    elif kind not in (None, "text"):
        raise Untranslatable("text.format must be text, json_object or json_schema")
    return out


# -- answers ---------------------------------------------------------------


def response_id() -> str:
    return "resp_" + secrets.token_hex(24)


def usage(chat_usage: Any) -> dict[str, Any] | None:
    """A chat ``usage`` as the Responses API reports it."""
    if not isinstance(chat_usage, dict):
        return None
    prompt = chat_usage.get("prompt_tokens_details") or {}
    completion = chat_usage.get("completion_tokens_details") or {}
    details = {
        "cached_tokens": prompt.get("cached_tokens") or 0,
        "cache_write_tokens": prompt.get("cache_write_tokens") or 0,
    }
    input_tokens = chat_usage.get("prompt_tokens") or 0
    output_tokens = chat_usage.get("completion_tokens") or 0
    out = {
        "input_tokens": input_tokens,
        "input_tokens_details": details,
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": completion.get("reasoning_tokens") or 0},
        "total_tokens": input_tokens + output_tokens,
    }
    if chat_usage.get("cost") is not None:  # OpenRouter's, as its own Responses API adds it
        out["cost"] = chat_usage["cost"]
    return out


def envelope(
    request: Mapping[str, Any], ident: str, model: str, created: int, status: str
) -> dict[str, Any]:
    """The response object around ``output``: what the request asked, echoed as OpenAI does."""
    text = request.get("text") if isinstance(request.get("text"), dict) else None
    asked = request.get("reasoning")
    reasoning: Mapping[str, Any] = asked if isinstance(asked, dict) else {}
    return {
        "id": ident,
        "object": "response",
        "created_at": created,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": model,
        "output": [],
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": {"effort": reasoning.get("effort"), "summary": None},
        "store": False,
        "temperature": request.get("temperature", 1.0),
        "text": text or {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools") or [],
        "top_p": request.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": None,
        "user": request.get("user"),
        "metadata": request.get("metadata") or {},
    }


def message_item(ident: str, text: str, status: str = "completed") -> dict[str, Any]:
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
    return {
        "id": ident,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [part] if status == "completed" else [],
    }


def call_item(ident: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {
        "id": ident,
        "type": "function_call",
        "status": status,
        "arguments": arguments,
        "call_id": call_id,
        "name": name,
    }


def item_id(prefix: str) -> str:
    return f"{prefix}_" + secrets.token_hex(24)


def finish(response: dict[str, Any], finish_reason: Any) -> None:
    """Sets ``status`` (and why, when incomplete) from the chat's finish reason."""
    if finish_reason == "length":
        response["status"] = "incomplete"
        response["incomplete_details"] = {"reason": "max_output_tokens"}
    elif finish_reason == "content_filter":
        response["status"] = "incomplete"
        response["incomplete_details"] = {"reason": "content_filter"}
    else:
        response["status"] = "completed"


def chat_to_response(chat: Mapping[str, Any], request: Mapping[str, Any]) -> dict[str, Any]:
    """A whole chat completion as the Responses object the client asked for."""
    choices = chat.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    created = chat.get("created")
    response = envelope(
        request,
        response_id(),
        str(chat.get("model") or request.get("model")),
        created if isinstance(created, int) else int(time.time()),
        "completed",
    )
    output: list[dict[str, Any]] = []
    text = message.get("content")
    if isinstance(text, str) and text:
        output.append(message_item(item_id("msg"), text))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        output.append(
            call_item(
                item_id("fc"),
                str(call.get("id")),
                str(function.get("name")),
                str(function.get("arguments") or ""),
                "completed",
            )
        )
    response["output"] = output
    finish(response, choice.get("finish_reason"))
    response["usage"] = usage(chat.get("usage"))
    return response


def dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
