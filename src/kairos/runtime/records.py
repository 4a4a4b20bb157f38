"""What the runtime publishes on the bus for each agent event (JSON-able, tool output capped)."""

from __future__ import annotations

from typing import Any

from kairos.agent.events import (
    Activity,
    AgentEvent,
    FinalAnswer,
    HookFailed,
    ModelDeltaEvent,
    Notice,
    RequestStats,
    RunError,
    ToolCallFinished,
    ToolCallStarted,
)

RESULT_CAP = 4000
"""Characters of a tool result put on the stream (the whole result is in the trajectory)."""


def agent_record(event: AgentEvent) -> tuple[str, dict[str, Any]] | None:
    """``(type, data)`` for the bus, or None for what front ends do not need (tool-call fragments)."""
    if isinstance(event, ModelDeltaEvent):
        delta = event.delta
        if delta.type in ("text", "reasoning"):
            return f"agent.{delta.type}", {"text": getattr(delta, "text", "")}
        return None
    if isinstance(event, ToolCallStarted):
        c = event.call
        return "agent.tool_started", {"id": c.id, "name": c.name, "arguments": c.arguments}
    if isinstance(event, ToolCallFinished):
        c, r = event.call, event.result
        return "agent.tool_finished", {
            "id": c.id,
            "name": c.name,
            "content": r.content[:RESULT_CAP],
            "truncated": len(r.content) > RESULT_CAP,
            "is_error": r.is_error,
            "duration_s": round(event.duration_s, 4),
        }
    if isinstance(event, FinalAnswer):
        return "agent.final", {"text": event.text, "stop_reason": event.stop_reason}
    if isinstance(event, RunError):
        return "agent.error", {"message": event.message}
    if isinstance(event, Notice):
        return "agent.notice", {"text": event.text, "source": event.source}
    if isinstance(event, HookFailed):
        return "agent.hook_failed", {"plugin": event.plugin, "hook": event.hook, "message": event.message}
    if isinstance(event, RequestStats):
        return "agent.request", event.to_record()
    if isinstance(event, Activity):
        return "agent.activity", {
            "kind": event.kind,
            "done": event.done,
            "total": event.total,
            "detail": event.detail,
            "text": event.describe(),
        }
    return None  # type: ignore[unreachable]  # a future event type: not streamed until it has a record
