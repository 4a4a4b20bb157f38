"""Claude through the Anthropic Messages API, with explicit prompt-cache breakpoints.

Anthropic caches only up to ``cache_control`` markers, so this backend places two: one after the
static system text (shared by every deployment) and one on the last block of the stable message
prefix, leaving the trailing status message outside the cache (book ch2 §3.5).

Choices worth knowing:

* Tool-call arguments that are not a JSON object are sent as ``input: {}`` (the API rejects
  anything else); the model already got an error tool result for that call, and our log keeps
  the original text.
* Thinking blocks are only valid with the signature the API issued for them. ``Message`` has no
  field for it, so signatures are remembered in memory, keyed by the reasoning text; reasoning
  whose signature is unknown (e.g. from a restored session or another backend) is not resent.
* ``system``-role messages inside the trajectory become user text (the API has no such role).
* ``request.temperature`` is not sent: the current SDK has no such parameter. Use ``extra_body``.
"""

from __future__ import annotations

import json
import os
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from kairos.errors import ConfigError, ModelError, ModelUnavailableError
from kairos.models._retry import RETRYABLE_STATUS, Retry, RetryPolicy, Verdict, retry_after_seconds, stream_with_retries
from kairos.models.base import TokenEstimator
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
    import anthropic as anthropic_sdk

DEFAULT_BASE_URL = "https://api.anthropic.com"
EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
_RETRYABLE_ERROR_TYPES = frozenset({"overloaded_error", "rate_limit_error", "api_error", "timeout_error"})
_STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls"}
_MAX_SIGNATURES = 512

Block = dict[str, Any]


def _import_sdk() -> Any:
    try:
        import anthropic
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ConfigError("the Anthropic backend needs the SDK: pip install 'kairos[anthropic]'") from exc
    return anthropic


class AnthropicModel:
    """A Claude model over the Messages API, streamed, with prompt caching and tool use."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        context_window: int = 200000,
        reasoning_policy: ReasoningPolicy = ReasoningPolicy.KEEP_ALL,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        timeout_s: float = 120.0,
        thinking: dict[str, Any] | None = None,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        sdk = _import_sdk()
        self._sdk = sdk
        self.name = model
        self.context_window = context_window
        self.reasoning_policy = ReasoningPolicy(reasoning_policy)
        self.base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
        key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            if self.base_url == DEFAULT_BASE_URL:
                raise ConfigError("no Anthropic API key: set ANTHROPIC_API_KEY or pass api_key")
            key = "no-key-required"  # a keyless local/proxy server speaking the Messages API
        self.timeout_s = timeout_s
        self.thinking = dict(thinking) if thinking else None
        """Passed through as the ``thinking`` parameter, e.g. ``{"type": "adaptive"}``."""
        self.extra_body = dict(extra_body or {})
        self.retry_policy = RetryPolicy(max_retries=max_retries, backoff_s=backoff_s)
        self._estimate = TokenEstimator()  # memoised estimate_request_tokens
        self._client: anthropic_sdk.AsyncAnthropic = sdk.AsyncAnthropic(
            api_key=key, base_url=self.base_url, max_retries=0, timeout=timeout_s
        )
        self._signatures: OrderedDict[str, list[Block]] = OrderedDict()

    def __repr__(self) -> str:
        return f"AnthropicModel({self.name!r}, base_url={self.base_url!r})"

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._client.close()

    async def __aenter__(self) -> AnthropicModel:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def count_tokens(self, request: ModelRequest) -> int:
        """An estimate; the exact count would cost an API round trip per call."""
        return self._estimate(request)

    # ---- request building ----------------------------------------------------------------

    def wire_system(self, request: ModelRequest) -> list[Block]:
        """Static part (cache breakpoint: identical for every deployment), then the deployment part."""
        blocks: list[Block] = []
        if request.system_static:
            blocks.append({"type": "text", "text": request.system_static, "cache_control": dict(EPHEMERAL)})
        if request.system_deployment:
            blocks.append({"type": "text", "text": request.system_deployment})
        return blocks

    def wire_tools(self, request: ModelRequest) -> list[Block]:
        return [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in request.tools]

    def wire_messages(self, request: ModelRequest) -> list[dict[str, Any]]:
        """Alternating user/assistant messages with a cache breakpoint at the end of the stable prefix."""
        messages = apply_reasoning_policy(request.messages, self.reasoning_policy)
        stable = len(messages) if request.stable_prefix_len is None else request.stable_prefix_len
        merged: list[tuple[str, list[tuple[int, Block]]]] = []
        for i, message in enumerate(messages):
            role, blocks = self._convert(message)
            if not blocks:
                continue  # the API rejects empty messages
            tagged = [(i, b) for b in blocks]
            if merged and merged[-1][0] == role:
                merged[-1][1].extend(tagged)
            else:
                merged.append((role, tagged))
        out: list[dict[str, Any]] = []
        breakpoint_block: Block | None = None
        for role, tagged in merged:
            if role == "user":
                # tool_result blocks must open a user message; stable partition keeps the harness order.
                tagged = [t for t in tagged if t[1]["type"] == "tool_result"] + [
                    t for t in tagged if t[1]["type"] != "tool_result"
                ]
            blocks = []
            for source, block in tagged:
                block = dict(block)
                blocks.append(block)
                if source < stable and block["type"] not in ("thinking", "redacted_thinking"):
                    breakpoint_block = block  # thinking blocks cannot carry cache_control
            out.append({"role": role, "content": blocks})
        if breakpoint_block is not None:
            breakpoint_block["cache_control"] = dict(EPHEMERAL)
        return out

    def _convert(self, message: Message) -> tuple[str, list[Block]]:
        if message.role == "tool":
            result: Block = {"type": "tool_result", "tool_use_id": message.tool_call_id or ""}
            if message.content:
                result["content"] = message.content
            return "user", [result]
        if message.role != "assistant":
            return "user", [{"type": "text", "text": message.content}] if message.content else []
        blocks: list[Block] = []
        if message.reasoning:
            blocks.extend(dict(b) for b in self._signatures.get(message.reasoning, ()))
        if message.content:
            blocks.append({"type": "text", "text": message.content})
        for call in message.tool_calls:
            blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": _tool_input(call.arguments)})
        return "assistant", blocks

    # ---- streaming -----------------------------------------------------------------------

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one reply; retried transparently until the first delta is out.

        ``ttft_s`` and ``total_s`` count from this call, backoff included: what the user waits.
        """
        started = time.monotonic()
        params: dict[str, Any] = {
            "model": self.name,
            "max_tokens": request.max_tokens,
            "messages": self.wire_messages(request),
        }
        if system := self.wire_system(request):
            params["system"] = system
        if tools := self.wire_tools(request):
            params["tools"] = tools
        if self.thinking:
            params["thinking"] = self.thinking
        if self.extra_body:
            params["extra_body"] = self.extra_body

        def attempt() -> AsyncGenerator[StreamEvent, None]:
            return self._attempt(params, started)

        async for event in stream_with_retries(
            attempt, policy=self.retry_policy, classify=self._classify, give_up=self._give_up
        ):
            yield event

    async def _attempt(self, params: dict[str, Any], started: float) -> AsyncGenerator[StreamEvent, None]:
        stream = await self._client.messages.create(stream=True, **params)
        state = _StreamState(started)
        try:
            async for event in stream:
                for delta in state.feed(event):
                    yield delta
        finally:
            await stream.close()  # also on cancellation: frees the connection promptly
        response = state.finish()
        signed = all(b.get("signature") or b["type"] == "redacted_thinking" for b in state.thinking_blocks)
        if response.message.reasoning and state.thinking_blocks and signed:
            # Unsigned thinking would be rejected if resent, so only signed blocks are remembered.
            self._remember(response.message.reasoning, state.thinking_blocks)
        yield ResponseDone(response)

    def _remember(self, reasoning: str, blocks: list[Block]) -> None:
        self._signatures[reasoning] = blocks
        self._signatures.move_to_end(reasoning)
        while len(self._signatures) > _MAX_SIGNATURES:
            self._signatures.popitem(last=False)

    # ---- errors --------------------------------------------------------------------------

    def _classify(self, exc: Exception) -> Verdict:
        sdk = self._sdk
        if isinstance(exc, sdk.APITimeoutError):
            return Retry(f"timed out after {self.timeout_s:g}s")
        if isinstance(exc, sdk.APIConnectionError):
            return Retry(f"connection failed ({exc.__cause__ or exc})")
        if isinstance(exc, sdk.APIStatusError):
            status: int = exc.status_code
            kind = getattr(exc, "type", None)
            message = getattr(exc, "api_message", None) or str(exc)
            if status in RETRYABLE_STATUS or status >= 500 or kind in _RETRYABLE_ERROR_TYPES:
                return Retry(
                    f"HTTP {status} {kind or ''}: {message}".strip(), retry_after_seconds(exc.response.headers)
                )
            hint = " (check ANTHROPIC_API_KEY)" if status in (401, 403) else ""
            what = f"rejected the request: HTTP {status}" if status >= 400 else f"failed mid-stream ({kind})"
            return ModelError(f"{self.name!r} at {self.base_url} {what}: {message}{hint}", model=self.name)
        return None

    def _give_up(self, attempts: int, reason: str) -> ModelUnavailableError:
        return ModelUnavailableError(
            f"model {self.name!r} at {self.base_url} is unavailable after {attempts} attempt(s); "
            f"last error: {reason}. Check your network, the Anthropic status page and your rate limits "
            f"(or raise max_retries).",
            model=self.name,
            attempts=attempts,
        )


def _tool_input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return {}
    return cast("dict[str, Any]", value) if isinstance(value, dict) else {}


class _StreamState:
    """Accumulates one streamed reply from raw Messages API events."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.first_delta_at: float | None = None
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.thinking_blocks: list[Block] = []
        self.blocks: dict[int, Block] = {}
        """Content-block index -> block being assembled (thinking and tool_use only)."""
        self.tool_positions: dict[int, int] = {}
        self.calls: list[list[str]] = []
        """Per tool call: [id, name, arguments, initial input as JSON]."""
        self.input_tokens = self.cache_read = self.cache_creation = self.output_tokens = 0
        self.stop_reason: str | None = None

    def feed(self, event: Any) -> list[ModelDelta]:
        out: list[ModelDelta] = []
        kind = event.type
        if kind == "message_start":
            self._usage(event.message.usage)
        elif kind == "message_delta":
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            if event.usage is not None:
                self._usage(event.usage)
        elif kind == "content_block_start":
            out.extend(self._start(event.index, event.content_block))
        elif kind == "content_block_delta":
            out.extend(self._delta(event.index, event.delta))
        if out and self.first_delta_at is None:
            self.first_delta_at = time.monotonic()
        return out

    def _usage(self, usage: Any) -> None:
        # message_delta carries cumulative counts; fields it leaves out stay as message_start set them.
        if getattr(usage, "input_tokens", None) is not None:
            self.input_tokens = usage.input_tokens
        if getattr(usage, "cache_read_input_tokens", None) is not None:
            self.cache_read = usage.cache_read_input_tokens
        if getattr(usage, "cache_creation_input_tokens", None) is not None:
            self.cache_creation = usage.cache_creation_input_tokens
        if getattr(usage, "output_tokens", None) is not None:
            self.output_tokens = usage.output_tokens

    def _start(self, index: int, block: Any) -> list[ModelDelta]:
        if block.type == "text" and block.text:
            self.text.append(block.text)
            return [TextDelta(block.text)]
        if block.type == "thinking":
            self.blocks[index] = {
                "type": "thinking",
                "thinking": block.thinking or "",
                "signature": block.signature or "",
            }
            self.thinking_blocks.append(self.blocks[index])
            if block.thinking:
                self.reasoning.append(block.thinking)
                return [ReasoningDelta(block.thinking)]
        if block.type == "redacted_thinking":
            self.thinking_blocks.append({"type": "redacted_thinking", "data": block.data})
        if block.type == "tool_use":
            position = len(self.calls)
            self.tool_positions[index] = position
            initial = json.dumps(block.input) if block.input else ""
            self.calls.append([block.id, block.name, "", initial])
            return [ToolCallDelta(position, block.id, block.name, "")]
        return []

    def _delta(self, index: int, delta: Any) -> list[ModelDelta]:
        if delta.type == "text_delta" and delta.text:
            self.text.append(delta.text)
            return [TextDelta(delta.text)]
        if delta.type == "thinking_delta" and delta.thinking:
            self.reasoning.append(delta.thinking)
            if index in self.blocks:
                self.blocks[index]["thinking"] += delta.thinking
            return [ReasoningDelta(delta.thinking)]
        if delta.type == "signature_delta" and index in self.blocks:
            self.blocks[index]["signature"] += delta.signature
        if delta.type == "input_json_delta" and index in self.tool_positions and delta.partial_json:
            position = self.tool_positions[index]
            self.calls[position][2] += delta.partial_json
            return [ToolCallDelta(position, None, None, delta.partial_json)]
        return []

    def finish(self) -> ModelResponse:
        # A tool without arguments streams no JSON at all; "{}" keeps the arguments parseable.
        calls = tuple(ToolCall(i, n, a or initial or "{}") for i, n, a, initial in self.calls)
        message = Message.assistant("".join(self.text), calls, reasoning="".join(self.reasoning) or None)
        now = time.monotonic()
        usage = Usage(
            prompt_tokens=self.input_tokens + self.cache_read + self.cache_creation,
            cached_prompt_tokens=self.cache_read,
            completion_tokens=self.output_tokens,
            ttft_s=None if self.first_delta_at is None else self.first_delta_at - self.started,
            total_s=now - self.started,
        )
        reason = self.stop_reason or ("tool_calls" if calls else "stop")
        return ModelResponse(message, usage, _STOP_REASONS.get(reason, reason))
