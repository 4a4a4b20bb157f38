"""The agent: a declarative :class:`Agent`, the :class:`Runner` that drives a session, and the plugin contract."""

from kairos.agent.agent import Agent
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
from kairos.agent.plugin import Plugin, ReplyGuard, RunContext, SafePoint, Stage
from kairos.agent.runner import Runner

__all__ = [
    "Activity",
    "Agent",
    "AgentEvent",
    "FinalAnswer",
    "HookFailed",
    "ModelDeltaEvent",
    "Notice",
    "Plugin",
    "ReplyGuard",
    "RequestStats",
    "RunContext",
    "RunError",
    "Runner",
    "SafePoint",
    "Stage",
    "ToolCallFinished",
    "ToolCallStarted",
]
