"""Typed events yielded by ``Agent.run``; one closed union, tagged by ``type``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from kairos.context.audit import PrefixAudit
from kairos.models.types import ModelDelta, ToolCall, Usage
from kairos.tools.base import ToolResult

StopReason: TypeAlias = Literal["answer", "max_iterations", "loop_guard", "interrupted", "length", "error"]


@dataclass(frozen=True, slots=True)
class ModelDeltaEvent:
    """A streamed fragment of the model's reply (text, reasoning or a tool-call piece)."""

    delta: ModelDelta
    type: Literal["model_delta"] = "model_delta"


@dataclass(frozen=True, slots=True)
class RequestStats:
    """Per-request facts for the trace: tokens, cache reuse, latency and the prefix audit."""

    index: int
    usage: Usage
    audit: PrefixAudit
    estimated_prompt_tokens: int
    type: Literal["status"] = "status"

    def to_record(self) -> dict[str, Any]:
        """What is stored per request in the session database (``kairos trace``)."""
        u = self.usage
        return {
            "index": self.index,
            "prompt_tokens": u.prompt_tokens,
            "cached_prompt_tokens": u.cached_prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "ttft_s": u.ttft_s,
            "total_s": u.total_s,
            "prefix_ok": self.audit.ok,
            "first_request": self.audit.first_request,
            "diverged_at": self.audit.diverged_at,
            "deliberate": self.audit.deliberate,
        }


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """A tool call is about to run."""

    call: ToolCall
    type: Literal["tool_started"] = "tool_started"


@dataclass(frozen=True, slots=True)
class ToolCallFinished:
    """A tool call ended (its result is already in the trajectory)."""

    call: ToolCall
    result: ToolResult
    duration_s: float
    type: Literal["tool_finished"] = "tool_finished"


@dataclass(frozen=True, slots=True)
class FinalAnswer:
    """The end of a run. ``stop_reason`` says whether the model answered or the harness stopped it."""

    text: str
    stop_reason: StopReason = "answer"
    type: Literal["final"] = "final"


@dataclass(frozen=True, slots=True)
class RunError:
    """A harness failure (model unreachable, context overflow). The trajectory is intact."""

    message: str
    error: BaseException | None = field(default=None, compare=False)
    type: Literal["error"] = "error"


@dataclass(frozen=True, slots=True)
class Notice:
    """Something worth showing that is not the answer: a retry wait, a tool set that changed."""

    text: str
    source: str = ""
    type: Literal["notice"] = "notice"


@dataclass(frozen=True, slots=True)
class HookFailed:
    """A plugin hook raised; the run went on without it (a guard plugin failed closed instead)."""

    plugin: str
    hook: str
    message: str
    error: BaseException | None = field(default=None, compare=False)
    type: Literal["hook_failed"] = "hook_failed"


ActivityKind: TypeAlias = Literal["waiting", "reading", "generating", "tool", "memory"]


@dataclass(frozen=True, slots=True)
class Activity:
    """What the agent is doing now, so a front end can show it instead of silence (a live status line).

    The newest one holds until the next, until reply text streams (the text replaces it), or until
    the run ends. ``waiting``: a model call started, no token yet; ``reading``: the model reads its
    prompt, ``done`` of ``total`` tokens; ``generating``: the reply (``detail``: the tool it calls);
    ``tool``: tools run (``detail``: their names); ``memory``: the user's memory is recalled.
    """

    kind: ActivityKind
    done: int = 0
    total: int = 0
    detail: str = ""
    type: Literal["activity"] = "activity"

    def describe(self) -> str:
        """One line for a status bar, e.g. ``reading the prompt — 512 of 2,653 tokens``."""
        if self.kind == "reading":
            return (
                f"reading the prompt — {self.done:,} of {self.total:,} tokens" if self.total else "reading the prompt"
            )
        if self.kind == "generating":
            return f"generating a call to {self.detail}" if self.detail else "generating"
        if self.kind == "tool":
            return f"running {self.detail}" if self.detail else "running tools"
        if self.kind == "memory":
            return "waiting for memory"
        return "waiting for the first token"


AgentEvent: TypeAlias = (
    ModelDeltaEvent
    | RequestStats
    | ToolCallStarted
    | ToolCallFinished
    | Notice
    | HookFailed
    | FinalAnswer
    | RunError
    | Activity
)
