"""Core message and request types shared by every backend.

These are plain frozen dataclasses: the harness keeps them in an append-only log and
serialises them byte-stably, so they must never be mutated after creation.
"""

from __future__ import annotations

import base64
import functools
import json
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal, TypeAlias

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
OriginKind: TypeAlias = Literal["user", "harness", "status", "external", "event"]
"""Who put a message into the trajectory, beyond its role: the user; the harness (a skills catalog,
a reminder); the status bar; external content (mail, a web hook: data, never instructions); an
event (a timer, a finished task)."""


@dataclass(frozen=True, slots=True)
class AllBut:
    """Text or a call of any tool except ``names`` (the loop guard masks a tool the model keeps repeating).

    Only the local backend can enforce it (its grammar); remote APIs have no exclusion and get ``auto``.
    """

    names: tuple[str, ...]


ToolChoice: TypeAlias = Literal["auto", "required", "none"] | tuple[str, ...] | AllBut
"""What the model may reply: ``auto`` text or calls; ``required`` a call; ``none`` text only; a tuple of
names: a call of one of those tools; :class:`AllBut`: text or a call of another tool. Backends enforce it
without changing the prompt (the cached prefix)."""


class ReasoningPolicy(StrEnum):
    """How earlier reasoning is sent back to the model (book ch2 §3.3).

    ``strip``: never resend reasoning (DeepSeek-R1 style).
    ``since_last_user``: resend reasoning only after the last real user message (Qwen3 style).
    ``keep_all``: resend every reasoning block verbatim, tool-call turns included (DeepSeek-V4, Claude).
    """

    STRIP = "strip"
    SINCE_LAST_USER = "since_last_user"
    KEEP_ALL = "keep_all"


class ArgumentsError(ValueError):
    """A tool call's arguments are not one JSON object; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool invocation requested by the model."""

    id: str
    name: str
    arguments: str
    """The arguments exactly as the model produced them (a JSON string, possibly malformed)."""

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI wire form of this call."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a dict (empty text means no arguments).

        Raises:
            ArgumentsError: the text is not valid JSON, or not a JSON object.
        """
        if not self.arguments.strip():
            return {}
        try:
            value = json.loads(self.arguments)
        except json.JSONDecodeError as e:
            raise ArgumentsError(f"not valid JSON ({e.msg} at position {e.pos})") from e
        if not isinstance(value, dict):
            raise ArgumentsError(f"must be a JSON object, got {type(value).__name__}")
        return value


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a message came from when its role does not say it all (see :data:`OriginKind`)."""

    kind: OriginKind
    source: str = ""
    """Who or what sent it: ``mail: alice@example.com``, ``timer: daily``, ``subagent sa-1``, ``skills``."""

    @staticmethod
    def of(kind: OriginKind, source: str = "") -> Origin:
        """The shared instance for ``(kind, source)``.

        A server then holds one per distinct sender, not one per message: fewer objects for Python's
        full GC pass to walk (the ``load`` bench's pauses).
        """
        return _shared_origin(kind, source)


@functools.lru_cache(maxsize=4096)
def _shared_origin(kind: OriginKind, source: str) -> Origin:
    return Origin(kind, source)


HARNESS = Origin("harness")
STATUS = Origin("status")

IMAGE_NOTE = "[screenshot omitted: this model reads text]"
"""What a model that reads only text gets in place of a message's images (one line)."""
IMAGE_TOKENS = 1600
"""The estimated prompt tokens of one image (a 1280×800 screenshot is about 1,400 for Claude, 1,100 for GPT-4o)."""


@dataclass(frozen=True, slots=True)
class Image:
    """An image a message carries (a tool's screenshot): its media type and its bytes in base64.

    Kept as base64 text, as both APIs take it and the trajectory stores it, so a stored image is sent
    byte-identically every time after (the cached prefix holds).
    """

    media_type: str
    data: str
    """The image's bytes, base64-encoded (standard alphabet, padded)."""

    @staticmethod
    def from_bytes(raw: bytes, media_type: str = "image/png") -> Image:
        """An image of ``raw`` bytes."""
        return Image(media_type, base64.b64encode(raw).decode("ascii"))

    def raw(self) -> bytes:
        """The image's bytes."""
        return base64.b64decode(self.data)

    def data_url(self) -> str:
        """``data:<media type>;base64,<data>`` (how the OpenAI API takes an image inline)."""
        return f"data:{self.media_type};base64,{self.data}"

    def __repr__(self) -> str:  # never a megabyte of base64 in a log line
        return f"Image({self.media_type!r}, {len(self.data):,} base64 chars)"


@dataclass(frozen=True, slots=True)
class Message:
    """One entry of the trajectory, in OpenAI chat roles."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    """For ``tool`` messages: the id of the call this result answers."""
    name: str | None = None
    """For ``tool`` messages: the tool's name (some templates need it)."""
    reasoning: str | None = None
    raw: str | None = None
    """The exact text a local model generated for this assistant turn; re-rendered verbatim so
    the KV cache also holds across the model's own replies."""
    origin: Origin | None = None
    """Set on ``user``-role messages the user did not type (status, catalog, mail, timers)."""
    images: tuple[Image, ...] = ()
    """Images the message carries (a ``tool`` result's screenshot). Backends of models that see send them
    (:meth:`text_content` for the others); the text of :meth:`to_openai` never holds them."""
    # Encodings computed on first use and kept with the message: a message is immutable and every
    # request resends the whole trajectory, so without them each request re-encodes every message
    # (O(trajectory) CPU per event on a long-running server). Not fields of the value: excluded from
    # ``==``, ``hash`` and ``repr``; ``replace`` starts a copy without them.
    _wire_json: str | None = field(default=None, init=False, repr=False, compare=False)
    _wire_json_bare: str | None = field(default=None, init=False, repr=False, compare=False)
    _record_json: str | None = field(default=None, init=False, repr=False, compare=False)
    _tokens: int = field(default=-1, init=False, repr=False, compare=False)

    @staticmethod
    def system(content: str) -> Message:
        """A system-role message."""
        return Message("system", content)

    @staticmethod
    def user(content: str, origin: Origin | None = None) -> Message:
        """A user-role message; ``origin`` marks one the user did not type."""
        return Message("user", content, origin=origin)

    @staticmethod
    def assistant(content: str = "", tool_calls: tuple[ToolCall, ...] = (), **kw: Any) -> Message:
        """An assistant reply, optionally with tool calls."""
        return Message("assistant", content, tool_calls=tool_calls, **kw)

    @staticmethod
    def tool(call_id: str, content: str, name: str | None = None, images: tuple[Image, ...] = ()) -> Message:
        """The result of tool call ``call_id`` (with the images the tool returned)."""
        return Message("tool", content, tool_call_id=call_id, name=name, images=images)

    def text_content(self) -> str:
        """The content as a model that reads only text gets it: images become :data:`IMAGE_NOTE`.

        The note is a line of its own after the text; a message without images is its content as is.
        """
        if not self.images:
            return self.content
        return f"{self.content}\n{IMAGE_NOTE}" if self.content else IMAGE_NOTE

    @property
    def from_user(self) -> bool:
        """A real user turn: typed by the user, not made by the harness or posted by an event."""
        return self.role == "user" and (self.origin is None or self.origin.kind == "user")

    def to_openai(self, *, include_reasoning: bool = False) -> dict[str, Any]:
        """The OpenAI chat-completions wire form of this message."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_openai() for c in self.tool_calls]
            if not self.content:
                out["content"] = None
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if include_reasoning and self.reasoning:
            out["reasoning_content"] = self.reasoning
        return out

    def openai_json(self, *, include_reasoning: bool = False) -> str:
        """``to_openai`` as compact JSON (as the OpenAI SDK sends it), encoded once per message."""
        if include_reasoning and self.reasoning:
            text = self._wire_json
            if text is None:
                text = _compact(self.to_openai(include_reasoning=True))
                object.__setattr__(self, "_wire_json", text)
            return text
        text = self._wire_json_bare
        if text is None:
            text = _compact(self.to_openai())
            object.__setattr__(self, "_wire_json_bare", text)
        return text

    def estimated_tokens(self) -> int:
        """Tokenizer-free estimate: content, tool-call arguments and per-message overhead (kept once computed)."""
        n = self._tokens
        if n < 0:
            n = 4 + estimate_tokens(self.content) + sum(estimate_tokens(c.arguments) + 8 for c in self.tool_calls)
            n += IMAGE_TOKENS * len(self.images)
            object.__setattr__(self, "_tokens", n)
        return n

    def to_record(self) -> dict[str, Any]:
        """A lossless JSON-able record, used for persistence and the prefix audit."""
        rec: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            rec["tool_calls"] = [[c.id, c.name, c.arguments] for c in self.tool_calls]
        for key in ("tool_call_id", "name", "reasoning", "raw"):
            value = getattr(self, key)
            if value is not None:
                rec[key] = value
        if self.origin is not None:
            rec["origin"] = [self.origin.kind, self.origin.source] if self.origin.source else [self.origin.kind]
        if self.images:  # absent when there are none: a record without images reads as before
            rec["images"] = [[i.media_type, i.data] for i in self.images]
        return rec

    @staticmethod
    def from_record(rec: dict[str, Any]) -> Message:
        """The message ``to_record`` produced (older records: ``synthetic`` before ``origin``, no ``images``).

        Raises:
            ValueError: the record is not a message record.
        """
        if not isinstance(rec, dict) or rec.get("role") not in ("system", "user", "assistant", "tool"):
            raise ValueError(f"not a message record: {str(rec)[:120]}")
        calls = tuple(ToolCall(str(i), str(n), str(a)) for i, n, a in rec.get("tool_calls", ()))
        origin = rec.get("origin")
        if origin is not None:
            origin = Origin.of(origin[0], origin[1] if len(origin) > 1 else "")
        elif rec.get("synthetic"):
            origin = HARNESS
        return Message(
            rec["role"],
            rec.get("content", ""),
            tool_calls=calls,
            tool_call_id=rec.get("tool_call_id"),
            name=rec.get("name"),
            reasoning=rec.get("reasoning"),
            raw=rec.get("raw"),
            origin=origin,
            images=tuple(Image(str(t), str(d)) for t, d in rec.get("images", ())),
        )

    def serialized(self) -> str:
        """Canonical bytes of this message (sorted keys, no whitespace variation); encoded once per message."""
        text = self._record_json
        if text is None:
            text = json.dumps(self.to_record(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
            object.__setattr__(self, "_record_json", text)
        return text

    def without_reasoning(self) -> Message:
        """This message without its reasoning (the same object when it has none)."""
        return replace(self, reasoning=None) if self.reasoning is not None else self


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the model is told about a tool: name, description and JSON schema of arguments."""

    name: str
    description: str
    parameters: dict[str, Any]

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI wire form of this tool."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def serialized(self) -> str:
        """Canonical bytes of this spec (what the prefix audit compares)."""
        return json.dumps(self.to_openai(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


SYSTEM_CACHE_BOUNDARY = "\n\n<!-- kairos:cache-boundary -->\n\n"
"""Separates the globally cacheable system text from the deployment-specific part (book ch2 §3.5)."""


@dataclass(frozen=True, slots=True)
class SystemPrompt:
    """The system prompt in two parts around the cache boundary.

    ``static`` is identical for every user and session (globally cacheable); ``deployment``
    holds what differs per install (workspace rules, product name). Neither may hold a value
    that changes between requests.
    """

    static: str
    deployment: str = ""

    def with_suffix(self, *parts: str) -> SystemPrompt:
        """This prompt with ``parts`` appended to the deployment part, one per line (empty ones skipped)."""
        lines = [p for p in (self.deployment, *parts) if p]
        return SystemPrompt(self.static, "\n".join(lines))


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything one model call sees, in order: system, tools, messages (status last)."""

    system_static: str
    system_deployment: str
    tools: tuple[ToolSpec, ...]
    messages: tuple[Message, ...]
    max_tokens: int = 1024
    temperature: float = 0.0
    stable_prefix_len: int | None = None
    """How many of ``messages`` form the stable prefix (everything but the trailing status).
    Backends with explicit cache markers (Anthropic) put their breakpoint there."""
    tool_choice: ToolChoice = "auto"
    """What this reply may be (see :data:`ToolChoice`); set per request by plugins, outside the prompt."""

    def allowed_tools(self) -> tuple[ToolSpec, ...] | None:
        """The tools a reply may call under :attr:`tool_choice` (None: text only); ``auto``/``required``: all.

        Names the request does not offer are ignored; when none is left the choice falls back to all tools.
        """
        if self.tool_choice == "none":
            return None
        if isinstance(self.tool_choice, tuple):
            named = tuple(t for t in self.tools if t.name in self.tool_choice)
            return named or self.tools
        if isinstance(self.tool_choice, AllBut):
            return tuple(t for t in self.tools if t.name not in self.tool_choice.names) or None
        return self.tools

    @property
    def system(self) -> str:
        """The system prompt as plain text: static part, boundary marker, deployment part."""
        if not self.system_deployment:
            return self.system_static
        return self.system_static + SYSTEM_CACHE_BOUNDARY + self.system_deployment

    def system_text(self) -> str:
        """System text for backends without cache markers: the marker becomes a blank line."""
        if not self.system_deployment:
            return self.system_static
        return self.system_static + "\n\n" + self.system_deployment


@dataclass(slots=True)
class Usage:
    """Token and latency accounting for one model call."""

    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_s: float | None = None
    total_s: float = 0.0

    @property
    def new_prompt_tokens(self) -> int:
        """Prompt tokens the backend had to compute (not served from its cache)."""
        return self.prompt_tokens - self.cached_prompt_tokens


@dataclass(slots=True)
class ModelResponse:
    """The normalised result of one model call."""

    message: Message
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"


# ---- streaming ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the reply's text."""

    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """A piece of the reply's reasoning."""

    text: str
    type: Literal["reasoning"] = "reasoning"


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of a tool call: ``index`` identifies the call within the reply."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    type: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True, slots=True)
class ResponseDone:
    """Always the last stream event: the complete response."""

    response: ModelResponse
    type: Literal["done"] = "done"


@dataclass(frozen=True, slots=True)
class ModelNotice:
    """Something the user should see while the model call is held up (a retry wait, a fallback).

    Not part of the reply: consumers show it and go on reading the stream.
    """

    text: str
    wait_s: float = 0.0
    """How long the backend now waits before it tries again (0 when it does not wait)."""
    type: Literal["notice"] = "notice"


@dataclass(frozen=True, slots=True)
class ModelProgress:
    """How far the model is before its reply, for a backend that knows (the local model reads in batches).

    Not part of the reply. ``reading``: ``done`` of the prompt's ``total`` tokens are in the model's
    cache so far (the part it reused counts as done). ``generating``: the prompt is read, the reply
    is being generated (a tool call's JSON streams no text, so this is all a front end would see).
    """

    stage: Literal["reading", "generating"]
    done: int = 0
    total: int = 0
    type: Literal["progress"] = "progress"


ModelDelta: TypeAlias = TextDelta | ReasoningDelta | ToolCallDelta
StreamEvent: TypeAlias = ModelDelta | ModelNotice | ModelProgress | ResponseDone


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate (about 4 characters per token for English and code)."""
    return (len(text) + 3) // 4


def _compact(value: object) -> str:
    """JSON as the OpenAI SDK sends it (compact, UTF-8, no NaN)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


_TOKENS = operator.attrgetter("_tokens")
_REASONING = operator.attrgetter("reasoning")


def estimate_messages_tokens(messages: Sequence[Message]) -> int:
    """The sum of :meth:`Message.estimated_tokens` over ``messages``.

    Runs in C for messages already counted (a request resends the whole trajectory; only its new
    messages are counted in Python).
    """
    counts = list(map(_TOKENS, messages))
    if -1 in counts:
        counts = [m.estimated_tokens() for m in messages]
    return sum(counts)


def any_reasoning(messages: Sequence[Message]) -> bool:
    """Whether any of ``messages`` carries reasoning (a C-speed scan)."""
    return any(map(_REASONING, messages))


def last_user_index(messages: Sequence[Message]) -> int:
    """Index of the last real user message (-1 when there is none)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].from_user:
            return i
    return -1


def apply_reasoning_policy(messages: tuple[Message, ...], policy: ReasoningPolicy) -> tuple[Message, ...]:
    """Drop reasoning the policy says the model must not see again."""
    if policy is ReasoningPolicy.KEEP_ALL:
        return messages
    if policy is ReasoningPolicy.STRIP:
        return tuple(m.without_reasoning() for m in messages)
    last_user = last_user_index(messages)
    return tuple(m.without_reasoning() if i < last_user else m for i, m in enumerate(messages))
