"""Any OpenAI-compatible chat-completions server: vLLM, Ollama, llama.cpp server, OpenAI, OpenRouter.

Streaming is normalised into kairos deltas; the SDK's own retries are off because only this
backend knows whether a delta has already reached the consumer (see ``kairos.models._retry``).
A stream that ends without a ``finish_reason`` was cut and is never used as a reply. Tool calls
that a server returns as text (a fenced JSON block, ``<tool_call>`` tags) become tool calls
unless ``text_tool_calls="off"`` (see ``kairos.models._text_tools``).

Images (a tool's screenshot): most servers take only text in a ``tool`` message, so for a model that sees
(``vision=True``) the images of a run of tool results follow it as one ``user`` message of ``image_url``
data-URL parts, each after a line naming the call it belongs to. A model that reads only text gets a
one-line note in the tool message instead (:meth:`~kairos.models.types.Message.text_content`).
"""

from __future__ import annotations

import json
import operator
import os
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any

import openai
from openai import AsyncOpenAI, AsyncStream
from openai.types.chat import ChatCompletion

from kairos.errors import ConfigError, ModelError
from kairos.models._remote import IncompleteStreamError, RemoteModel, ReplyParts, TextToolCalls
from kairos.models._retry import RETRYABLE_STATUS, Retry, Verdict
from kairos.models._text_tools import TextToolScanner
from kairos.models.base import estimate_request_tokens, estimate_tokens
from kairos.models.types import (
    AllBut,
    Message,
    ModelDelta,
    ModelRequest,
    ModelResponse,
    ReasoningPolicy,
    ResponseDone,
    StreamEvent,
    ToolCallDelta,
    ToolSpec,
    Usage,
    any_reasoning,
    apply_reasoning_policy,
    last_user_index,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
NO_KEY_PLACEHOLDER = "sk-no-key-required"
"""Sent when no key is configured: local servers (llama.cpp, Ollama, vLLM) ignore it, the SDK needs one."""

_IMAGES = operator.attrgetter("images")
_TOOLS_CACHE_SIZE = 16
"""Tool lists whose JSON is kept (sessions of one agent share one list; sub-agents add a few)."""


class OpenAICompatModel(RemoteModel[bytes]):
    """A chat model behind the OpenAI chat-completions API, streamed with tool calling.

    Args:
        model: the model name the server serves.
        base_url: the API root, usually ending in ``/v1``; default ``KAIROS_BASE_URL``,
            ``OPENAI_BASE_URL`` or OpenAI's.
        api_key: default ``KAIROS_API_KEY`` or ``OPENAI_API_KEY``; keyless servers need none (OpenAI's own
            API does: with neither a base URL nor a key, construction fails with a ConfigError).
        context_window: the server model's window in tokens.
        reasoning_policy: which earlier reasoning is sent back.
        max_retries: retries after a transient failure (429, 5xx, timeouts, a cut stream).
        backoff_s: the first retry wait; it doubles per retry.
        timeout_s: how long one HTTP attempt may take.
        max_retry_wait_s: the longest single wait, a server's ``Retry-After`` included.
        text_tool_calls: ``auto`` turns tool calls the server left in the text into tool calls
            (see ``kairos.models._text_tools``); ``off`` keeps text as text.
        extra_body: extra request fields (``top_k``, ``chat_template_kwargs``, ...).
        vision: the model sees images (``[remote] vision``): a tool result's images are sent; otherwise a
            one-line note stands for them.
        sleep: how to wait between attempts (tests pass a fake); default ``asyncio.sleep``.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        context_window: int = 32768,
        reasoning_policy: ReasoningPolicy = ReasoningPolicy.SINCE_LAST_USER,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        timeout_s: float = 120.0,
        max_retry_wait_s: float = 60.0,
        text_tool_calls: TextToolCalls = "auto",
        extra_body: dict[str, Any] | None = None,
        vision: bool = False,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        self.vision = vision
        """Whether the model sees images (else each message's images become a one-line note)."""
        super().__init__(
            model,
            base_url=base_url
            or os.environ.get("KAIROS_BASE_URL")
            or os.environ.get("OPENAI_BASE_URL")
            or DEFAULT_BASE_URL,
            context_window=context_window,
            reasoning_policy=reasoning_policy,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_s=backoff_s,
            max_retry_wait_s=max_retry_wait_s,
            text_tool_calls=text_tool_calls,
            sleep=sleep,
        )
        key = api_key or os.environ.get("KAIROS_API_KEY") or os.environ.get("OPENAI_API_KEY")
        if key is None and self.base_url == DEFAULT_BASE_URL:  # OpenAI's API would refuse it after 5 slow tries
            raise ConfigError(
                f"openai:{model} has nowhere to go: no base URL is set (--base-url, KAIROS_BASE_URL or "
                "OPENAI_BASE_URL; e.g. http://127.0.0.1:8000/v1 for vLLM, http://127.0.0.1:11434/v1 for Ollama) "
                "and no API key for OpenAI's own API (OPENAI_API_KEY)"
            )
        key = key or NO_KEY_PLACEHOLDER
        self.extra_body = dict(extra_body or {})
        self._sdk = openai
        self._client = AsyncOpenAI(api_key=key, base_url=self.base_url, max_retries=0, timeout=timeout_s)
        self._tools_json: dict[tuple[int, ...], tuple[tuple[ToolSpec, ...], str]] = {}
        self._system_json: tuple[str, str] = ("", "")
        """The last system text and its message's JSON (every session of an agent shares one)."""

    def wire_messages(self, request: ModelRequest) -> list[dict[str, Any]]:
        """The ``messages`` array sent: plain system text first, reasoning filtered by the policy."""
        out: list[dict[str, Any]] = []
        system = request.system_text()
        if system:
            out.append({"role": "system", "content": system})
        # After the policy, only messages that may keep reasoning still carry it.
        messages = apply_reasoning_policy(request.messages, self.reasoning_policy)
        wire = [m.to_openai(include_reasoning=True) for m in messages]
        out.extend(_with_images(messages, wire, self.vision, lambda d: d))
        return out

    def _prepare(self, request: ModelRequest) -> bytes:
        """The request body, encoded once per call (retries resend the same bytes).

        Encoded here rather than by the SDK, and from pieces kept between requests: each message
        keeps its own JSON (:meth:`Message.openai_json`) and the tool schemas' JSON is kept per
        tool list, so a request costs O(new messages) in encoding however long the trajectory,
        and the bytes are those of :meth:`_prepare_plain`.
        """
        if "model" in self.extra_body or "messages" in self.extra_body:
            return self._prepare_plain(request)  # an override of the head: no shortcut
        rest = {
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            **self.extra_body,
        }
        # {"model":…,"messages":[…],<rest>}: the same bytes as one json.dumps of the whole body
        text = f'{{"model":{_dumps(self.name)},"messages":[{",".join(self._wire_json(request))}],{_dumps(rest)[1:]}'
        return self._with_tools(text, request).encode()

    def _prepare_plain(self, request: ModelRequest) -> bytes:
        """The request body as one ``json.dumps`` of it (the reference :meth:`_prepare` matches)."""
        body: dict[str, Any] = {
            "model": self.name,
            "messages": self.wire_messages(request),
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            **self.extra_body,
        }
        return self._with_tools(_dumps(body), request).encode()

    def _with_tools(self, text: str, request: ModelRequest) -> str:
        """``text`` (a JSON object) with the request's tools and, unless ``auto``, its ``tool_choice``."""
        if not request.tools or "tools" in self.extra_body:
            return text
        text = f'{text[:-1]},"tools":{self._tools_text(request.tools)}}}'
        choice = request.tool_choice  # AllBut: the API has no exclusion, so the model may call any tool (auto)
        if choice != "auto" and not isinstance(choice, AllBut) and "tool_choice" not in self.extra_body:
            text = f'{text[:-1]},"tool_choice":{_dumps(_wire_choice(request))}}}'
        return text

    def _wire_json(self, request: ModelRequest) -> list[str]:
        """The JSON of each element of :meth:`wire_messages`, mostly from the messages' own caches."""
        out: list[str] = []
        system = request.system_text()
        if system:
            if self._system_json[0] != system:
                self._system_json = (system, _dumps({"role": "system", "content": system}))
            out.append(self._system_json[1])
        messages = request.messages
        policy = self.reasoning_policy
        if policy is ReasoningPolicy.KEEP_ALL or not any_reasoning(messages):
            keep_from = 0  # (without reasoning anywhere both encodings are the same)
        elif policy is ReasoningPolicy.STRIP:
            keep_from = len(messages)
        else:  # reasoning since the last real user message (all of it when there is none)
            keep_from = max(0, last_user_index(messages))
        wire = [m.openai_json() for m in messages[:keep_from]]
        wire += [m.openai_json(include_reasoning=True) for m in messages[keep_from:]]
        out += _with_images(messages, wire, self.vision, _dumps)
        return out

    def _tools_text(self, tools: tuple[ToolSpec, ...]) -> str:
        key = tuple(map(id, tools))  # the cached entry holds the specs, so their ids stay theirs
        hit = self._tools_json.get(key)
        if hit is None:
            if len(self._tools_json) >= _TOOLS_CACHE_SIZE:
                self._tools_json.pop(next(iter(self._tools_json)))
            hit = self._tools_json[key] = (tools, _dumps([t.to_openai() for t in tools]))
        return hit[1]

    async def _attempt(
        self, request: ModelRequest, prepared: bytes, started: float
    ) -> AsyncGenerator[StreamEvent, None]:
        # The SDK's typed ``chat.completions.create`` walks the whole body against its TypedDicts
        # and builds a pydantic object per chunk: for plain JSON, as here, that took most of
        # ``kairos serve``'s CPU per event in the load bench. Same endpoint, same errors (the
        # stream still raises the SDK's APIError on an error event), chunks as plain dicts.
        stream = await self._client.post(
            "/chat/completions",
            content=prepared,
            cast_to=ChatCompletion,
            stream=True,
            stream_cls=AsyncStream[object],
        )
        state = _StreamState(started, self._text_scanner(request))
        try:
            async for chunk in stream:
                for delta in state.feed(chunk):
                    yield delta
        finally:
            # Also runs on cancellation or when the consumer stops early: frees the connection.
            await stream.close()
        if state.finish_reason is None:
            # A close-delimited stream cut short looks like a normal end; only finish_reason
            # tells them apart. The reply (or a tool call's arguments) may be truncated.
            raise IncompleteStreamError("the stream ended without a finish_reason, so the reply is incomplete")
        for delta in state.parts.mark(state.parts.end_text()):
            yield delta
        yield ResponseDone(state.finish(request))

    # ---- errors --------------------------------------------------------------------------

    def _status_detail(self, exc: Any) -> str:
        return f": {_server_message(exc.body, exc.message)}"

    def _rejected(self, exc: Any, status: int) -> ModelError:
        message = _server_message(exc.body, exc.message)
        return ModelError(
            f"{self.name!r} at {self.base_url} rejected the request: HTTP {status}: {message}{_hint(status)}",
            model=self.name,
        )

    def _classify_other(self, exc: Exception) -> Verdict:
        if isinstance(exc, json.JSONDecodeError):
            # The SDK lets an event whose data is not JSON through as is: the server does not
            # speak the protocol, and asking again would get the same.
            return ModelError(
                f"{self.name!r} at {self.base_url} failed mid-stream: the stream sent data that is not JSON ({exc})",
                model=self.name,
            )
        if isinstance(exc, openai.APIError):
            # An {"error": ...} object inside the event stream (vLLM, OpenRouter): retry if it is transient.
            message = _server_message(exc.body, exc.message)
            if exc.code and exc.code.isdigit() and int(exc.code) in RETRYABLE_STATUS:
                return Retry(f"stream error {exc.code}: {message}")
            return ModelError(f"{self.name!r} at {self.base_url} failed mid-stream: {message}", model=self.name)
        return None

    def _unavailable_hint(self) -> str:
        return (
            "Check that the server is running and reachable at that URL, that it "
            f"serves a model named {self.name!r}, and your rate limits"
        )


def _server_message(body: object, fallback: str) -> str:
    """The human part of an error body (``{"message": ...}``, possibly nested in ``error``)."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return fallback


def _hint(status: int) -> str:
    if status in (401, 403):
        return " (check the API key: KAIROS_API_KEY or OPENAI_API_KEY)"
    if status == 404:
        return " (check the base URL, it usually ends in /v1, and the model name)"
    return ""


class _StreamState:
    """Accumulates one streamed reply: deltas out, final ``Message`` and ``Usage`` at the end."""

    def __init__(self, started: float, scanner: TextToolScanner | None) -> None:
        self.started = started
        self.parts = ReplyParts(started, scanner)
        self.positions: dict[int, int] = {}
        """Server tool-call index -> position in ``parts.calls`` (servers need not start at 0)."""
        self.last_id: str | None = None
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None

    def feed(self, chunk: object) -> list[ModelDelta]:
        """Take one chunk (parsed JSON; shapes vary by server, so nothing is assumed)."""
        if not isinstance(chunk, dict):
            return []
        if isinstance(usage := chunk.get("usage"), dict):
            self.usage = usage
        parts = self.parts
        out: list[ModelDelta] = []
        for choice in _dicts(chunk.get("choices")):
            if choice.get("index") not in (0, None):  # n=1; some servers leave the index out
                continue
            if finish := choice.get("finish_reason"):
                self.finish_reason = str(finish)
            delta = choice.get("delta")  # absent in some servers' final chunk
            if not isinstance(delta, dict):
                continue
            out += parts.add_reasoning(_reasoning_text(delta))
            out += parts.add_text(_text(delta.get("content")))
            for fragment in _dicts(delta.get("tool_calls")):
                function = fragment.get("function")
                function = function if isinstance(function, dict) else {}
                name, arguments = _text(function.get("name")), _text(function.get("arguments"))
                call_id = _text(fragment.get("id"))
                index = fragment.get("index")
                position = self._position(index if isinstance(index, int) else None, call_id, out)
                call = parts.calls[position]
                if call_id and call.id is None:
                    call.id = call_id
                if name and call.name is None:
                    call.name = name
                call.arguments += arguments
                out.append(ToolCallDelta(position, call_id or None, name or None, arguments))
        return parts.mark(out)

    def _position(self, index: int | None, call_id: str | None, out: list[ModelDelta]) -> int:
        """Where a fragment belongs; ``index`` is the server's, possibly missing."""
        calls = self.parts.calls
        # Some servers (Gemini's compat layer, old Ollama) omit the index: a new id means a new call.
        if index is None:
            if self.positions and (not call_id or call_id == self.last_id):
                return len(calls) - 1
            index = -1 - len(calls)
        if call_id:
            self.last_id = call_id
        if index not in self.positions:
            out += self.parts.new_call()
            self.positions[index] = len(calls) - 1
        return self.positions[index]

    def finish(self, request: ModelRequest) -> ModelResponse:
        message = self.parts.message()
        now = time.monotonic()
        usage = Usage(ttft_s=self.parts.ttft(), total_s=now - self.started)
        if self.usage is not None:
            usage.prompt_tokens = _count(self.usage.get("prompt_tokens"))
            usage.completion_tokens = _count(self.usage.get("completion_tokens"))
            usage.cached_prompt_tokens = _cached_tokens(self.usage)
        else:
            # Servers that ignore stream_options send no usage; an estimate keeps context accounting alive.
            usage.prompt_tokens = estimate_request_tokens(request)
            usage.completion_tokens = estimate_tokens(
                message.content + (message.reasoning or "") + "".join(c.arguments for c in message.tool_calls)
            )
        return ModelResponse(message, usage, self.parts.finish_reason(self.finish_reason))


def _with_images(
    messages: Sequence[Message], wire: list[Any], vision: bool, encode: Callable[[dict[str, Any]], Any]
) -> list[Any]:
    """``wire`` (one entry per message) with the messages' images as this API takes them.

    A model that sees: a user message's images join its content as ``image_url`` parts; the images of a
    run of tool results follow the run as one user message (a ``user`` message between two tool results
    would break the tool-call protocol). Otherwise each message with images reads :data:`IMAGE_NOTE` instead.
    ``encode`` turns a changed message's wire dict into an entry of ``wire`` (a dict or its JSON).
    """
    if not any(map(_IMAGES, messages)):  # C speed: a request resends the whole trajectory
        return wire
    out: list[Any] = []
    shots: list[dict[str, Any]] = []
    for m, entry in zip(messages, wire, strict=True):
        if shots and m.role != "tool":
            out.append(encode({"role": "user", "content": shots}))
            shots = []
        if not m.images or m.role not in ("tool", "user"):  # only results and user turns carry images
            out.append(entry)
        elif not vision:
            out.append(encode({**m.to_openai(), "content": m.text_content()}))
        elif m.role == "user":
            parts = [{"type": "text", "text": m.content}] if m.content else []
            out.append(encode({**m.to_openai(), "content": parts + _image_parts(m)}))
        else:
            out.append(entry)
            shown = f"Screenshot from tool call {m.tool_call_id}" + (f" ({m.name})" if m.name else "") + ":"
            shots += [{"type": "text", "text": shown}, *_image_parts(m)]
    if shots:
        out.append(encode({"role": "user", "content": shots}))
    return out


def _image_parts(m: Message) -> list[dict[str, Any]]:
    return [{"type": "image_url", "image_url": {"url": i.data_url()}} for i in m.images]


def _dumps(value: object) -> str:
    """JSON as the SDK sends it (compact, UTF-8, no NaN)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _dicts(value: object) -> list[dict[str, Any]]:
    """The objects of a JSON array (nothing when it is not one)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _reasoning_text(delta: dict[str, Any]) -> str:
    """``reasoning_content`` (vLLM < 0.10, DeepSeek, llama.cpp) or ``reasoning`` (newer vLLM, OpenRouter)."""
    for key in ("reasoning_content", "reasoning"):
        value = delta.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _cached_tokens(usage: dict[str, Any]) -> int:
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None:
        # DeepSeek reports its context cache as prompt_cache_hit_tokens.
        cached = usage.get("prompt_cache_hit_tokens")
    return _count(cached)


def _wire_choice(request: ModelRequest) -> str | dict[str, Any]:
    """The request's ``tool_choice`` in OpenAI's shape (several named tools: ``required``)."""
    allowed = request.allowed_tools() or ()
    if isinstance(request.tool_choice, tuple) and len(allowed) == 1:
        return {"type": "function", "function": {"name": allowed[0].name}}
    return request.tool_choice if isinstance(request.tool_choice, str) else "required"
