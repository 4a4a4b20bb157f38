"""Any OpenAI-compatible chat-completions server: vLLM, Ollama, llama.cpp server, OpenAI, OpenRouter.

Streaming is normalised into kairos deltas; the SDK's own retries are off because only this
backend knows whether a delta has already reached the consumer (see ``kairos.models._retry``).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

import openai
from openai import AsyncOpenAI, omit

from kairos.errors import ModelError, ModelUnavailableError
from kairos.models._retry import RETRYABLE_STATUS, Retry, RetryPolicy, Verdict, retry_after_seconds, stream_with_retries
from kairos.models.base import TokenEstimator, estimate_request_tokens, estimate_tokens
from kairos.models.types import (
    Message,
    ModelDelta,
    ModelRequest,
    ModelResponse,
    ReasoningDelta,
    ReasoningPolicy,
    ResponseDone,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
    apply_reasoning_policy,
)

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam, ChatCompletionToolUnionParam
    from openai.types.chat.chat_completion_chunk import ChoiceDelta
    from openai.types.completion_usage import CompletionUsage

DEFAULT_BASE_URL = "https://api.openai.com/v1"
NO_KEY_PLACEHOLDER = "sk-no-key-required"
"""Sent when no key is configured: local servers (llama.cpp, Ollama, vLLM) ignore it, the SDK needs one."""


class OpenAICompatModel:
    """A chat model behind the OpenAI chat-completions API, streamed with tool calling."""

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
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        self.name = model
        self.context_window = context_window
        self.reasoning_policy = ReasoningPolicy(reasoning_policy)
        self.base_url = (
            base_url or os.environ.get("KAIROS_BASE_URL") or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        )
        key = api_key or os.environ.get("KAIROS_API_KEY") or os.environ.get("OPENAI_API_KEY") or NO_KEY_PLACEHOLDER
        self.timeout_s = timeout_s
        self.extra_body = dict(extra_body or {})
        self.retry_policy = RetryPolicy(max_retries=max_retries, backoff_s=backoff_s)
        self._estimate = TokenEstimator()  # memoised estimate_request_tokens
        self._client = AsyncOpenAI(api_key=key, base_url=self.base_url, max_retries=0, timeout=timeout_s)

    def __repr__(self) -> str:
        return f"OpenAICompatModel({self.name!r}, base_url={self.base_url!r})"

    async def aclose(self) -> None:
        """Close the HTTP connection pool (open sockets would otherwise leak until GC)."""
        await self._client.close()

    async def __aenter__(self) -> OpenAICompatModel:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def count_tokens(self, request: ModelRequest) -> int:
        """An estimate: remote servers expose no tokenizer we could call without a download."""
        return self._estimate(request)

    def wire_messages(self, request: ModelRequest) -> list[dict[str, Any]]:
        """The ``messages`` array sent: plain system text first, reasoning filtered by the policy."""
        out: list[dict[str, Any]] = []
        system = request.system_text()
        if system:
            out.append({"role": "system", "content": system})
        # After the policy, only messages that may keep reasoning still carry it.
        out.extend(
            m.to_openai(include_reasoning=True) for m in apply_reasoning_policy(request.messages, self.reasoning_policy)
        )
        return out

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one completion; retried transparently until the first delta is out.

        ``ttft_s`` and ``total_s`` count from this call, backoff included: what the user waits.
        """
        started = time.monotonic()
        messages = self.wire_messages(request)
        tools = [t.to_openai() for t in request.tools]

        def attempt() -> AsyncGenerator[StreamEvent, None]:
            return self._attempt(request, messages, tools, started)

        async for event in stream_with_retries(
            attempt, policy=self.retry_policy, classify=self._classify, give_up=self._give_up
        ):
            yield event

    async def _attempt(
        self, request: ModelRequest, messages: list[dict[str, Any]], tools: list[dict[str, Any]], started: float
    ) -> AsyncGenerator[StreamEvent, None]:
        stream = await self._client.chat.completions.create(
            model=self.name,
            messages=cast("list[ChatCompletionMessageParam]", messages),
            tools=cast("list[ChatCompletionToolUnionParam]", tools) if tools else omit,
            temperature=request.temperature,
            max_tokens=request.max_tokens,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=self.extra_body or None,
        )
        state = _StreamState(started)
        try:
            async for chunk in stream:
                for delta in state.feed(chunk):
                    yield delta
        finally:
            # Also runs on cancellation or when the consumer stops early: frees the connection.
            await stream.close()
        yield ResponseDone(state.finish(request))

    # ---- errors --------------------------------------------------------------------------

    def _classify(self, exc: Exception) -> Verdict:
        if isinstance(exc, openai.APITimeoutError):
            return Retry(f"timed out after {self.timeout_s:g}s")
        if isinstance(exc, openai.APIConnectionError):
            return Retry(f"connection failed ({exc.__cause__ or exc})")
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            message = _server_message(exc.body, exc.message)
            if status in RETRYABLE_STATUS or status >= 500:
                return Retry(f"HTTP {status}: {message}", retry_after_seconds(exc.response.headers))
            return ModelError(
                f"{self.name!r} at {self.base_url} rejected the request: HTTP {status}: {message}{_hint(status)}",
                model=self.name,
            )
        if isinstance(exc, openai.APIError):
            # An {"error": ...} object inside the event stream (vLLM, OpenRouter): retry if it is transient.
            message = _server_message(exc.body, exc.message)
            if exc.code and exc.code.isdigit() and int(exc.code) in RETRYABLE_STATUS:
                return Retry(f"stream error {exc.code}: {message}")
            return ModelError(f"{self.name!r} at {self.base_url} failed mid-stream: {message}", model=self.name)
        return None

    def _give_up(self, attempts: int, reason: str) -> ModelUnavailableError:
        return ModelUnavailableError(
            f"model {self.name!r} at {self.base_url} is unavailable after {attempts} attempt(s); "
            f"last error: {reason}. Check that the server is running and reachable at that URL, that it "
            f"serves a model named {self.name!r}, and your rate limits (or raise max_retries).",
            model=self.name,
            attempts=attempts,
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


@dataclass(slots=True)
class _CallParts:
    id: str | None = None
    name: str | None = None
    arguments: str = ""


class _StreamState:
    """Accumulates one streamed reply: deltas out, final ``Message`` and ``Usage`` at the end."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.first_delta_at: float | None = None
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[_CallParts] = []
        self.positions: dict[int, int] = {}
        """Server tool-call index -> position in ``calls`` (servers need not start at 0)."""
        self.usage: CompletionUsage | None = None
        self.finish_reason: str | None = None

    def feed(self, chunk: ChatCompletionChunk) -> list[ModelDelta]:
        if chunk.usage is not None:
            self.usage = chunk.usage
        out: list[ModelDelta] = []
        for choice in chunk.choices:
            if choice.index not in (0, None):  # n=1; some servers leave the index out
                continue
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
            delta = cast("ChoiceDelta | None", choice.delta)  # absent in some servers' final chunk
            if delta is None:
                continue
            reasoning = _reasoning_text(delta.model_extra)
            if reasoning:
                self.reasoning.append(reasoning)
                out.append(ReasoningDelta(reasoning))
            if delta.content:
                self.text.append(delta.content)
                out.append(TextDelta(delta.content))
            for fragment in delta.tool_calls or ():
                function = fragment.function
                name = function.name if function is not None else None
                arguments = (function.arguments if function is not None else None) or ""
                position = self._position(fragment.index, fragment.id)
                call = self.calls[position]
                if fragment.id and call.id is None:
                    call.id = fragment.id
                if name and call.name is None:
                    call.name = name
                call.arguments += arguments
                out.append(ToolCallDelta(position, fragment.id or None, name or None, arguments))
        if out and self.first_delta_at is None:
            self.first_delta_at = time.monotonic()
        return out

    def _position(self, index: int | None, call_id: str | None) -> int:
        """Where a fragment belongs; ``index`` is the server's, possibly missing."""
        # Some servers (Gemini's compat layer, old Ollama) omit the index: a new id means a new call.
        if index is None:
            if self.calls and (not call_id or call_id == self.calls[-1].id):
                return len(self.calls) - 1
            index = -1 - len(self.calls)
        if index not in self.positions:
            self.positions[index] = len(self.calls)
            self.calls.append(_CallParts())
        return self.positions[index]

    def finish(self, request: ModelRequest) -> ModelResponse:
        calls = tuple(ToolCall(c.id or f"call_{uuid.uuid4().hex[:24]}", c.name or "", c.arguments) for c in self.calls)
        message = Message.assistant("".join(self.text), calls, reasoning="".join(self.reasoning) or None)
        now = time.monotonic()
        ttft = None if self.first_delta_at is None else self.first_delta_at - self.started
        usage = Usage(ttft_s=ttft, total_s=now - self.started)
        if self.usage is not None:
            usage.prompt_tokens = int(self.usage.prompt_tokens or 0)
            usage.completion_tokens = int(self.usage.completion_tokens or 0)
            usage.cached_prompt_tokens = _cached_tokens(self.usage)
        else:
            # Servers that ignore stream_options send no usage; an estimate keeps context accounting alive.
            usage.prompt_tokens = estimate_request_tokens(request)
            usage.completion_tokens = estimate_tokens(
                message.content + (message.reasoning or "") + "".join(c.arguments for c in calls)
            )
        return ModelResponse(message, usage, self.finish_reason or ("tool_calls" if calls else "stop"))


def _reasoning_text(extra: dict[str, Any] | None) -> str:
    """``reasoning_content`` (vLLM < 0.10, DeepSeek, llama.cpp) or ``reasoning`` (newer vLLM, OpenRouter)."""
    if not extra:
        return ""
    for key in ("reasoning_content", "reasoning"):
        value = extra.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _cached_tokens(usage: CompletionUsage) -> int:
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    if cached is None:
        # DeepSeek reports its context cache as prompt_cache_hit_tokens.
        cached = (usage.model_extra or {}).get("prompt_cache_hit_tokens")
    return int(cached) if isinstance(cached, int) else 0
