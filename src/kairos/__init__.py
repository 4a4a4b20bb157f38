"""kairos: a cache-stable agent harness.

The public surface is small on purpose: build an :class:`Agent` from a model, tools and a
system prompt, open a :class:`Session`, and iterate the events of ``Agent.run``.
"""

from kairos.agent.events import (
    AgentEvent,
    FinalAnswer,
    ModelDeltaEvent,
    RequestStats,
    RunError,
    ToolCallFinished,
    ToolCallStarted,
)
from kairos.agent.loop import Agent
from kairos.context.builder import ContextBuilder
from kairos.context.session import Session, SessionStore
from kairos.models.base import Model
from kairos.models.types import (
    Message,
    ModelRequest,
    ModelResponse,
    ReasoningPolicy,
    SystemPrompt,
    ToolCall,
    ToolSpec,
    Usage,
)
from kairos.tools.base import Tool, ToolContext, ToolResult, tool

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentEvent",
    "ContextBuilder",
    "FinalAnswer",
    "Message",
    "Model",
    "ModelDeltaEvent",
    "ModelRequest",
    "ModelResponse",
    "ReasoningPolicy",
    "RequestStats",
    "RunError",
    "Session",
    "SessionStore",
    "SystemPrompt",
    "Tool",
    "ToolCall",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolContext",
    "ToolResult",
    "ToolSpec",
    "Usage",
    "tool",
]
