"""What the runtime publishes on the bus for each agent event (tool output capped)."""

from __future__ import annotations

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
from kairos.models.types import ReasoningDelta, TextDelta
from kairos.runtime.outbound import (
    AgentActivity,
    AgentError,
    AgentFinal,
    AgentHookFailed,
    AgentNotice,
    AgentReasoning,
    AgentRequest,
    AgentText,
    AgentToolFinished,
    AgentToolStarted,
    OutboundPayload,
)

RESULT_CAP = 4000
"""Characters of a tool result put on the stream (the whole result is in the trajectory)."""


def agent_record(event: AgentEvent) -> OutboundPayload | None:
    """The bus payload of an agent event, or None for what front ends do not need (tool-call fragments)."""
    if isinstance(event, ModelDeltaEvent):
        delta = event.delta
        if isinstance(delta, TextDelta):
            return AgentText(text=delta.text)
        if isinstance(delta, ReasoningDelta):
            return AgentReasoning(text=delta.text)
        return None
    if isinstance(event, ToolCallStarted):
        c = event.call
        return AgentToolStarted(id=c.id, name=c.name, arguments=c.arguments)
    if isinstance(event, ToolCallFinished):
        c, r = event.call, event.result
        return AgentToolFinished(
            id=c.id,
            name=c.name,
            content=r.content[:RESULT_CAP],
            truncated=len(r.content) > RESULT_CAP,
            is_error=r.is_error,
            duration_s=round(event.duration_s, 4),
        )
    if isinstance(event, FinalAnswer):
        return AgentFinal(text=event.text, stop_reason=event.stop_reason)
    if isinstance(event, RunError):
        return AgentError(message=event.message)
    if isinstance(event, Notice):
        return AgentNotice(text=event.text, source=event.source)
    if isinstance(event, HookFailed):
        return AgentHookFailed(plugin=event.plugin, hook=event.hook, message=event.message)
    if isinstance(event, RequestStats):
        return AgentRequest(**event.to_record())
    if isinstance(event, Activity):
        return AgentActivity(
            kind=event.kind, done=event.done, total=event.total, detail=event.detail, text=event.describe()
        )
    return None  # type: ignore[unreachable]  # a future event type: not streamed until it has a record
