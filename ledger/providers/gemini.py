"""Google Gemini API (``models/{model}:generateContent`` and
``:streamGenerateContent?alt=sse``), authenticated with ``x-goog-api-key``.

* usage (``usageMetadata``): ``promptTokenCount`` already includes
  ``cachedContentTokenCount``; output is ``candidatesTokenCount`` plus
  ``thoughtsTokenCount`` (the thinking tokens, reported apart). No cache-write
  counter exists (implicit caching).
* there is no top-level id or model: ``responseId`` is the generation id and
  ``modelVersion`` the model served.
* a stream is a sequence of whole ``GenerateContentResponse`` objects whose
  ``usageMetadata`` is cumulative; there is no ``[DONE]`` sentinel.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import quote

from ledger.errors import is_transient_code
from ledger.providers import wire
from ledger.providers.base import (
    Capabilities,
    ChatRequest,
    ErrorBody,
    HttpRequest,
    InBandError,
    Parsed,
    Provider,
    Usage,
)
from ledger.providers.sse import SSEDecoder


def modality_count(details: Any, modality: str) -> int | None:
    """The ``tokenCount`` of ``modality`` in a ``*TokensDetails`` list (None when not listed)."""
    if not isinstance(details, list):
        return None
    counts = [
        wire.count(entry.get("tokenCount"))
        for entry in details
        if isinstance(entry, dict) and entry.get("modality") == modality
    ]
    return wire.safe_add(*counts)


#: Gemini's per-modality lists and the part of the usage each one splits.
_MODALITY_LISTS: Final = (
    ("input", "promptTokensDetails"),
    ("cache_read", "cacheTokensDetails"),
    ("output", "candidatesTokensDetails"),
)


def modalities(raw: dict[str, Any]) -> list[tuple[str, str, int | None]]:
    """Every (part, modality, tokens) the usage lists, modality in lower case."""
    found: list[tuple[str, str, int | None]] = []
    for part, key in _MODALITY_LISTS:
        details = raw.get(key)
        for entry in details if isinstance(details, list) else []:
            modality = entry.get("modality") if isinstance(entry, dict) else None
            if isinstance(modality, str) and modality:
                found.append((part, modality.lower()[:32], wire.count(entry.get("tokenCount"))))
    return found


def normalise_usage(raw: dict[str, Any], problems: list[str]) -> Usage:
    thoughts = wire.count(raw.get("thoughtsTokenCount"))
    return wire.UsageBuilder(problems).build(
        input_tokens=wire.count(raw.get("promptTokenCount")),
        output_tokens=wire.safe_add(wire.count(raw.get("candidatesTokenCount")), thoughts),
        cache_read=wire.count(raw.get("cachedContentTokenCount")),
        reasoning=thoughts,
        # Audio is billed at its own rates; the other modalities at the text rate.
        input_audio=modality_count(raw.get("promptTokensDetails"), "AUDIO"),
        cache_audio_read=modality_count(raw.get("cacheTokensDetails"), "AUDIO"),
        output_audio=modality_count(raw.get("candidatesTokensDetails"), "AUDIO"),
        modalities=modalities(raw),
    )


def in_band_error(data: dict[str, Any]) -> InBandError | None:
    error = data.get("error")
    if not isinstance(error, dict):
        return None
    status = wire.count(error.get("code"))
    if status is not None and not 100 <= status <= 599:
        status = None
    word = wire.text(error.get("status"))
    return InBandError(
        message=wire.text(error.get("message")) or "provider reported an error",
        code=word or (str(status) if status is not None else None),
        http_status=status,
        transient=is_transient_code(status if status is not None else word),
    )


def _candidate_text(data: dict[str, Any]) -> tuple[str | None, str | None]:
    """(text, finishReason) of the first candidate, thought parts left out."""
    candidates = data.get("candidates")
    if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
        return None, None
    first = candidates[0]
    parts = wire.obj(first.get("content")).get("parts")
    texts = [
        part["text"]
        for part in (parts if isinstance(parts, list) else [])
        if isinstance(part, dict) and isinstance(part.get("text"), str) and not part.get("thought")
    ]
    return "".join(texts), wire.text(first.get("finishReason"))


class _State:
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.usage_raw: dict[str, Any] | None = None
        self.model: str | None = None
        self.generation_id: str | None = None
        self.finish_reason: str | None = None
        self.error: InBandError | None = None

    def absorb(self, data: dict[str, Any]) -> str | None:
        if isinstance(usage := data.get("usageMetadata"), dict):
            self.usage_raw = usage
        self.model = wire.text(data.get("modelVersion")) or self.model
        self.generation_id = wire.text(data.get("responseId")) or self.generation_id
        self.error = in_band_error(data) or self.error
        text, finish = _candidate_text(data)
        self.finish_reason = finish or self.finish_reason
        return text

    def parsed(self, content: str | None, valid: bool = True) -> Parsed:
        usage = None if self.usage_raw is None else normalise_usage(self.usage_raw, self.problems)
        return Parsed(
            content=content,
            usage=usage,
            model=self.model,
            generation_id=self.generation_id,
            finish_reason=self.finish_reason,
            error=self.error,
            valid=valid,
            problems=tuple(self.problems),
        )


def parse_generate_content(body: bytes) -> Parsed:
    data = wire.loads(body)
    if not isinstance(data, dict):
        return Parsed(valid=False, problems=("body is not a JSON object",))
    state = _State()
    text = state.absorb(data)
    if state.usage_raw is None:
        state.problems.append("no usageMetadata in response")
    return state.parsed(text, valid=text is not None or state.error is not None)


class GenerateStreamParser:
    def __init__(self) -> None:
        self._sse = SSEDecoder()
        self._state = _State()
        self._parts: list[str] = []

    @property
    def error(self) -> InBandError | None:
        return self._state.error

    @property
    def done(self) -> bool:
        # No sentinel: the chunk with a finish reason is the last (its usage is final).
        return self._state.finish_reason is not None

    def feed(self, data: bytes) -> list[str]:
        out: list[str] = []
        for _, text in self._sse.feed_pairs(data):
            self._event(text, out)
        return out

    def finish(self) -> Parsed:
        for _, text in self._sse.close_pairs():
            self._event(text, [])
        return self._state.parsed("".join(self._parts))

    def _event(self, raw: str, out: list[str]) -> None:
        data = wire.loads_text(raw)
        if not isinstance(data, dict):
            self._state.problems.append("a stream event is not a JSON object")
            return
        text = self._state.absorb(data)
        if text:
            self._parts.append(text)
            out.append(text)


def text_parts(content: Any) -> list[dict[str, Any]]:
    """Gemini ``parts`` for an OpenAI-shaped message content: a string, or a list of
    blocks whose text blocks (``{"type": "text", "text": …}``) become text parts.
    Other blocks (images by URL…) have no Gemini equivalent here and are left out."""
    if isinstance(content, str):
        return [{"text": content}]
    if not isinstance(content, list):
        return [] if content is None else [{"text": str(content)}]
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append({"text": block})
        elif isinstance(block, dict) and isinstance(block.get("text"), str):
            parts.append({"text": block["text"]})
    return parts


def _contents(request: ChatRequest) -> tuple[list[dict[str, Any]], list[str]]:
    contents: list[dict[str, Any]] = []
    system: list[str] = []
    for message in request.messages:
        parts = text_parts(message.get("content"))
        role = message.get("role")
        if role == "system":
            system.extend(part["text"] for part in parts)
        else:
            gemini_role = "model" if role == "assistant" else "user"
            contents.append({"role": gemini_role, "parts": parts})
    return contents, system


class GeminiProvider(Provider):
    name = "gemini"
    family = "gemini_generate_content"
    capabilities = Capabilities(
        sticky_session=False,
        prompt_caching="implicit",
        streaming_usage=True,
        reports_cost=False,
        reports_upstream=False,
    )
    default_base_url = "https://generativelanguage.googleapis.com/v1beta"
    api_key_env = "GEMINI_API_KEY"
    base_url_env = "GEMINI_BASE_URL"
    prices_provider_id = "google"

    def build_request(self, request: ChatRequest) -> HttpRequest:
        contents, system = _contents(request)
        body: dict[str, Any] = {"contents": contents}
        if system:
            body["systemInstruction"] = {"parts": [{"text": "\n\n".join(system)}]}
        config: dict[str, Any] = {}
        if request.max_tokens is not None:
            config["maxOutputTokens"] = request.max_tokens
        if request.temperature is not None:
            config["temperature"] = request.temperature
        if config:
            body["generationConfig"] = config
        if request.extra_body:
            body.update(request.extra_body)
        model = quote(request.model.removeprefix("models/"), safe="")
        method = "streamGenerateContent?alt=sse" if request.stream else "generateContent"
        headers = {"content-type": "application/json", "x-goog-api-key": self._api_key or ""}
        return HttpRequest("POST", f"{self.base_url}/models/{model}:{method}", headers, body)

    def parse_response(self, body: bytes) -> Parsed:
        return parse_generate_content(body)

    def parse_error(self, status: int, body: bytes) -> ErrorBody:
        error = in_band_error(wire.obj(wire.loads(body)))
        if error is None:
            return ErrorBody(message="no error details in the body")
        return ErrorBody(message=error.message, code=error.code)

    def stream_parser(self) -> GenerateStreamParser:
        return GenerateStreamParser()
