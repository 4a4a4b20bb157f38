"""kairos: a cache-stable agent harness.

The public surface is small on purpose: build an :class:`Agent` from a model, tools, a system
prompt and plugins, open a :class:`Session` from a :class:`SessionStore`, and iterate the events
of ``Agent.run``. Anything can reach a running session through its inbox (``Session.post``).

The names are imported on first use (:mod:`kairos._lazy`): a program that needs only part of
kairos does not pay for loading the agent, the models and their dependencies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kairos._lazy import lazy_exports

if TYPE_CHECKING:
    from kairos.agent import (
        Agent,
        AgentEvent,
        FinalAnswer,
        HookFailed,
        ModelDeltaEvent,
        Notice,
        Plugin,
        RequestStats,
        RunContext,
        RunError,
        Runner,
        ToolCallFinished,
        ToolCallStarted,
    )
    from kairos.context.inbox import ExternalContent, Interrupt, TaskCompleted, TimerFired, UserInput
    from kairos.context.session import Session, SessionStore
    from kairos.models.base import Model
    from kairos.models.types import (
        Message,
        ModelRequest,
        ModelResponse,
        Origin,
        ReasoningPolicy,
        SystemPrompt,
        ToolCall,
        ToolSpec,
        Usage,
    )
    from kairos.tools.base import Tool, ToolContext, ToolResult, ToolSet, ToolSource
    from kairos.tools.function import FunctionTool, tool
    from kairos.tools.schema import SchemaTool

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "kairos.agent": "Agent AgentEvent FinalAnswer HookFailed ModelDeltaEvent Notice Plugin RequestStats RunContext "
        "RunError Runner ToolCallFinished ToolCallStarted",
        "kairos.context.inbox": "ExternalContent Interrupt TaskCompleted TimerFired UserInput",
        "kairos.context.session": "Session SessionStore",
        "kairos.models.base": "Model",
        "kairos.models.types": "Message ModelRequest ModelResponse Origin ReasoningPolicy SystemPrompt ToolCall "
        "ToolSpec Usage",
        "kairos.tools.base": "Tool ToolContext ToolResult ToolSet ToolSource",
        "kairos.tools.function": "FunctionTool tool",
        "kairos.tools.schema": "SchemaTool",
    },
)

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentEvent",
    "ExternalContent",
    "FinalAnswer",
    "FunctionTool",
    "HookFailed",
    "Interrupt",
    "Message",
    "Model",
    "ModelDeltaEvent",
    "ModelRequest",
    "ModelResponse",
    "Notice",
    "Origin",
    "Plugin",
    "ReasoningPolicy",
    "RequestStats",
    "RunContext",
    "RunError",
    "Runner",
    "SchemaTool",
    "Session",
    "SessionStore",
    "SystemPrompt",
    "TaskCompleted",
    "TimerFired",
    "Tool",
    "ToolCall",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolContext",
    "ToolResult",
    "ToolSet",
    "ToolSource",
    "ToolSpec",
    "Usage",
    "UserInput",
    "tool",
]
