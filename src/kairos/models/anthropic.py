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
* A stream that ends without ``message_stop`` was cut and is never used as a reply.
* Tool calls a Messages-API-speaking local server returns as text become tool calls, as in the
  OpenAI-compatible backend (``text_tool_calls``; Claude itself always uses ``tool_use``).
* A tool result's images (a screenshot) go inside its ``tool_result`` as base64 ``image`` blocks after the
  text, a user message's after its text, when ``vision`` is on; otherwise a one-line note stands for them.
"""

from __future__ import annotations

import json
import os
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kairos.errors import ConfigError, ModelError
from kairos.models._remote import IncompleteStreamError, RemoteModel, ReplyParts, TextToolCalls
from kairos.models._text_tools import TextToolScanner
from kairos.models.types import (
    AllBut,
    ArgumentsError,
    Message,
    ModelDelta,
    ModelRequest,
    ModelResponse,
    ReasoningPolicy,
    ResponseDone,
    StreamEvent,
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
        raise ConfigError("the Anthropic backend needs the SDK: pip install 'kairos-harness[anthropic]'") from exc
    return anthropic


class AnthropicModel(RemoteModel[dict[str, Any]]):
    """A Claude model over the Messages API, streamed, with prompt caching and tool use.

    Args:
        model: the model name, e.g. ``claude-sonnet-4-5``.
        api_key: default ``ANTHROPIC_API_KEY``; a keyless server at another ``base_url`` needs none.
        base_url: default ``ANTHROPIC_BASE_URL`` or Anthropic's API.
        context_window: the model's window in tokens.
        reasoning_policy: which earlier thinking is sent back.
        max_retries: retries after a transient failure (429, 529, 5xx, timeouts, a cut stream).
        backoff_s: the first retry wait; it doubles per retry.
        timeout_s: how long one HTTP attempt may take.
        max_retry_wait_s: the longest single wait, a server's ``Retry-After`` included.
        text_tool_calls: ``auto`` turns tool calls a server left in the text into tool calls;
            ``off`` keeps text as text.
        thinking: the ``thinking`` parameter, e.g. ``{"type": "adaptive"}``.
        extra_body: extra request fields (``metadata``, ...).
        vision: the model sees images (``[remote] vision``): a tool result's images are sent; otherwise a
            one-line note stands for them.
        sleep: how to wait between attempts (tests pass a fake); default ``asyncio.sleep``.

    Raises:
        ConfigError: the SDK is not installed, or no key is set for Anthropic's own API.
    """

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
        max_retry_wait_s: float = 60.0,
        text_tool_calls: TextToolCalls = "auto",
        thinking: dict[str, Any] | None = None,
        extra_body: dict[str, Any] | None = None,
        vision: bool = False,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        sdk = _import_sdk()
        self.vision = vision
        """Whether the model sees images (else each message's images become a one-line note)."""
        super().__init__(
            model,
            base_url=base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL,
            context_window=context_window,
            reasoning_policy=reasoning_policy,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_s=backoff_s,
            max_retry_wait_s=max_retry_wait_s,
            text_tool_calls=text_tool_calls,
            sleep=sleep,
        )
        self._sdk = sdk
        key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            if self.base_url == DEFAULT_BASE_URL:
                raise ConfigError("no Anthropic API key: set ANTHROPIC_API_KEY or pass api_key")
            key = "no-key-required"  # a keyless local/proxy server speaking the Messages API
        self.thinking = dict(thinking) if thinking else None
        """Passed through as the ``thinking`` parameter, e.g. ``{"type": "adaptive"}``."""
        self.extra_body = dict(extra_body or {})
        self._client: anthropic_sdk.AsyncAnthropic = sdk.AsyncAnthropic(
            api_key=key, base_url=self.base_url, max_retries=0, timeout=timeout_s
        )
        self._signatures: OrderedDict[str, list[Block]] = OrderedDict()

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
        """The request's tools in Anthropic's shape (``input_schema``), in request order."""
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
            if message.images and self.vision:
                result["content"] = _with_images(message)
            elif text := message.text_content():
                result["content"] = text
            return "user", [result]
        if message.role != "assistant":
            if message.images and self.vision and message.role == "user":
                return "user", _with_images(message)
            content = message.text_content() if message.role == "user" else message.content
            return "user", [{"type": "text", "text": content}] if content else []
        blocks: list[Block] = []
        if message.reasoning:
            blocks.extend(dict(b) for b in self._signatures.get(message.reasoning, ()))
        if message.content:
            blocks.append({"type": "text", "text": message.content})
        for call in message.tool_calls:
            blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": _tool_input(call)})
        return "assistant", blocks

    # ---- streaming -----------------------------------------------------------------------

    def _prepare(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.name,
            "max_tokens": request.max_tokens,
            "messages": self.wire_messages(request),
        }
        if system := self.wire_system(request):
            params["system"] = system
        if tools := self.wire_tools(request):
            params["tools"] = tools
            if (choice := _wire_choice(request)) is not None and not self.thinking:  # thinking allows auto only
                params["tool_choice"] = choice
        if self.thinking:
            params["thinking"] = self.thinking
        if self.extra_body:
            params["extra_body"] = self.extra_body
        return params

    async def _attempt(
        self, request: ModelRequest, prepared: dict[str, Any], started: float
    ) -> AsyncGenerator[StreamEvent, None]:
        stream = await self._client.messages.create(stream=True, **prepared)
        state = _StreamState(started, self._text_scanner(request))
        try:
            async for event in stream:
                for delta in state.feed(event):
                    yield delta
        finally:
            await stream.close()  # also on cancellation: frees the connection promptly
        if not state.stopped:
            # The connection closed early: the reply (or a tool call's input) may be truncated.
            raise IncompleteStreamError("the stream ended without message_stop, so the reply is incomplete")
        for delta in state.parts.mark(state.parts.end_text()):
            yield delta
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

    def _status_detail(self, exc: Any) -> str:
        kind = getattr(exc, "type", None)
        message = getattr(exc, "api_message", None) or str(exc)
        return f" {kind}: {message}" if kind else f": {message}"

    def _is_transient(self, exc: Any) -> bool:
        # Mid-stream error events arrive with the stream's 200 status: their type tells.
        return getattr(exc, "type", None) in _RETRYABLE_ERROR_TYPES

    def _rejected(self, exc: Any, status: int) -> ModelError:
        kind = getattr(exc, "type", None)
        message = getattr(exc, "api_message", None) or str(exc)
        hint = " (check ANTHROPIC_API_KEY)" if status in (401, 403) else ""
        what = f"rejected the request: HTTP {status}" if status >= 400 else f"failed mid-stream ({kind})"
        return ModelError(f"{self.name!r} at {self.base_url} {what}: {message}{hint}", model=self.name)

    def _unavailable_hint(self) -> str:
        return "Check your network, the Anthropic status page and your rate limits"


def _with_images(message: Message) -> list[Block]:
    """The message's text (when it has some), then its images as base64 ``image`` blocks."""
    text: list[Block] = [{"type": "text", "text": message.content}] if message.content else []
    return text + [
        {"type": "image", "source": {"type": "base64", "media_type": i.media_type, "data": i.data}}
        for i in message.images
    ]


def _tool_input(call: ToolCall) -> dict[str, Any]:
    """The API takes only an object; malformed arguments (already answered by an error result) go as {}."""
    try:
        return call.parsed_arguments()
    except ArgumentsError:
        return {}


class _StreamState:
    """Accumulates one streamed reply from raw Messages API events."""

    def __init__(self, started: float, scanner: TextToolScanner | None) -> None:
        self.started = started
        self.parts = ReplyParts(started, scanner)
        self.thinking_blocks: list[Block] = []
        self.blocks: dict[int, Block] = {}
        """Content-block index -> block being assembled (thinking only)."""
        self.tool_positions: dict[int, int] = {}
        """Content-block index -> position of its tool call in ``parts.calls``."""
        self.input_tokens = self.cache_read = self.cache_creation = self.output_tokens = 0
        self.stop_reason: str | None = None
        self.stopped = False

    def feed(self, event: Any) -> list[ModelDelta]:
        out: list[ModelDelta] = []
        kind = event.type
        if kind == "message_start":
            self._usage(event.message.usage)
        elif kind == "message_delta":
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            if event.usage is not None:
                self._usage(event.usage)
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "content_block_start":
            out = self._start(event.index, event.content_block)
        elif kind == "content_block_delta":
            out = self._delta(event.index, event.delta)
        return self.parts.mark(out)

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
        if block.type == "text":
            return self.parts.add_text(block.text or "")
        if block.type == "thinking":
            self.blocks[index] = {
                "type": "thinking",
                "thinking": block.thinking or "",
                "signature": block.signature or "",
            }
            self.thinking_blocks.append(self.blocks[index])
            return self.parts.add_reasoning(block.thinking or "")
        if block.type == "redacted_thinking":
            self.thinking_blocks.append({"type": "redacted_thinking", "data": block.data})
        if block.type == "tool_use":
            initial = json.dumps(block.input) if block.input else ""
            out = self.parts.new_call(block.id, block.name, initial)
            position = len(self.parts.calls) - 1
            self.tool_positions[index] = position
            out.append(ToolCallDelta(position, block.id, block.name, ""))
            return out
        return []

    def _delta(self, index: int, delta: Any) -> list[ModelDelta]:
        if delta.type == "text_delta":
            return self.parts.add_text(delta.text or "")
        if delta.type == "thinking_delta" and delta.thinking:
            if index in self.blocks:
                self.blocks[index]["thinking"] += delta.thinking
            return self.parts.add_reasoning(delta.thinking)
        if delta.type == "signature_delta" and index in self.blocks:
            self.blocks[index]["signature"] += delta.signature
        if delta.type == "input_json_delta" and index in self.tool_positions and delta.partial_json:
            position = self.tool_positions[index]
            self.parts.calls[position].arguments += delta.partial_json
            return [ToolCallDelta(position, None, None, delta.partial_json)]
        return []

    def finish(self) -> ModelResponse:
        # A tool without arguments streams no JSON at all; "{}" keeps the arguments parseable.
        message = self.parts.message(empty_arguments="{}")
        usage = Usage(
            prompt_tokens=self.input_tokens + self.cache_read + self.cache_creation,
            cached_prompt_tokens=self.cache_read,
            completion_tokens=self.output_tokens,
            ttft_s=self.parts.ttft(),
            total_s=time.monotonic() - self.started,
        )
        reason = _STOP_REASONS.get(self.stop_reason, self.stop_reason) if self.stop_reason else None
        return ModelResponse(message, usage, self.parts.finish_reason(reason))


def _wire_choice(request: ModelRequest) -> dict[str, str] | None:
    """The request's ``tool_choice`` in Anthropic's shape; None for ``auto`` (the default)."""
    choice = request.tool_choice
    if choice == "auto" or isinstance(choice, AllBut):  # no exclusion in the API: the model may call any tool
        return None
    if choice == "none":
        return {"type": "none"}
    allowed = request.allowed_tools() or ()
    if isinstance(choice, tuple) and len(allowed) == 1:
        return {"type": "tool", "name": allowed[0].name}
    return {"type": "any"}
