"""kairos: a cache-stable agent harness.

The public surface is small on purpose: build an :class:`Agent` from a model, tools, a system
prompt and plugins, open a :class:`Session` from a :class:`SessionStore`, and iterate the events
of ``Agent.run``. Anything can reach a running session through its inbox (``Session.post``).
"""

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
