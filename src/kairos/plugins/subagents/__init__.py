"""Sub-agents: isolation instead of compression (book ch2 §3.13, §3.5 point 2).

``spawn_subagent`` runs a child agent in its own session; the parent receives only an
:class:`~kairos.plugins.subagents.envelope.Envelope`, never the child's messages. Context:
``minimal`` (the task as written), ``llm_generated`` (the parent model first writes a brief in a
side query sharing its prefix) or ``fork`` (a byte-identical prefix: same system prompt, tools,
model settings and trajectory, so the prompt cache is shared; the tool subset is then enforced at
call time). Async children are tasks owned by a per-session runner, cancelled when the session
closes; each posts its envelope to the parent's inbox when it ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kairos.agent.plugin import Plugin, RunContext
from kairos.models.types import SystemPrompt
from kairos.plugins.defences import InjectionDefences
from kairos.plugins.subagents.envelope import (
    FROM_MAIN,
    FROM_USER,
    TOOL_RESULT,
    ContextMode,
    Envelope,
    Mode,
    SubAgentConfig,
    tag_task,
)
from kairos.plugins.subagents.runner import SubAgentRunner
from kairos.prompts.builder import SUBAGENT_SPEC, PromptBuilder
from kairos.tools.base import Resource, Tool, ToolContext, ToolResult, ToolSource
from kairos.tools.function import make_tool

RUNNER_KEY: Resource[SubAgentRunner] = Resource("kairos.subagents")


class SubAgents(Plugin):
    """Four tools plus a runner per parent session.

    Args:
        config: ``[subagents]`` settings; default :class:`SubAgentConfig`'s defaults.
        depth: how deep this agent is nested (0: the main agent); children get ``depth + 1``.
    """

    stage = "annotate"

    def __init__(self, config: SubAgentConfig | None = None, *, depth: int = 0) -> None:
        self.config = config or SubAgentConfig()
        self.depth = depth
        self._prompt = PromptBuilder(SUBAGENT_SPEC, volatile=(str(Path.home()),))

    def child_system(self, parent: SystemPrompt) -> SystemPrompt:
        """Static sub-agent prompt (shared by every child) + the parent's deployment part + the cap."""
        words = self.config.max_summary_tokens * 3 // 4
        limit = f"Report limit: at most {words} words."
        return SystemPrompt(self._prompt.static(), parent.deployment).with_suffix(limit)

    @staticmethod
    def wraps_external(ctx: RunContext) -> bool:
        """Whether the parent tags external content (then a child that read some is tagged too)."""
        defences = ctx.service(InjectionDefences)
        return defences is not None and defences.config.tag_external

    def tools(self) -> Sequence[Tool | ToolSource]:
        """``spawn_subagent``, ``subagent_status``, ``message_subagent``, ``cancel_subagent``."""
        if not self.config.enabled:
            return ()
        return (
            make_tool(spawn_subagent, timeout_s=self.config.timeout_s),
            make_tool(subagent_status),
            make_tool(message_subagent),
            make_tool(cancel_subagent),
        )

    async def open(self, ctx: RunContext) -> None:
        """The session's runner, where the tools find it."""
        ctx.session.tool_context.put(RUNNER_KEY, SubAgentRunner(self, ctx))

    async def close(self, ctx: RunContext) -> None:
        """Cancel the session's running children."""
        runner = ctx.session.tool_context.take(RUNNER_KEY)
        if isinstance(runner, SubAgentRunner):
            await runner.aclose()


def _runner(ctx: ToolContext) -> SubAgentRunner | ToolResult:
    r = ctx.get(RUNNER_KEY)
    if r is not None:
        return r
    return ToolResult("Sub-agents are not available here (a sub-agent cannot start its own).", True)


async def spawn_subagent(
    task: str,
    tools: list[str] | None = None,
    mode: Mode = "sync",
    context: ContextMode = "minimal",
    *,
    ctx: ToolContext,
) -> ToolResult:
    """Delegate a self-contained task to a sub-agent with its own context, so its searching and reading
    never fills yours. You get back only an envelope: status, a short summary and the files it wrote.
    The sub-agent cannot see this conversation (except with context="fork"), so the task must state the
    goal, every fact and path it needs, and what to report. Use it for broad searches or multi-step side
    work; do small lookups yourself.

    Args:
        task: the complete task. Quote the user's own words on lines starting with "> ".
        tools: names of your tools it may use (default: all except the sub-agent tools).
        mode: "sync" waits for the envelope; "async" returns a task id at once and its result arrives
            as a message when it ends.
        context: "minimal" sends the task as written; "llm_generated" first writes a brief from this
            conversation; "fork" starts it with a copy of this conversation (shares the prompt cache).
    """
    r = _runner(ctx)
    return r if isinstance(r, ToolResult) else await r.spawn(task, tools, mode, context)


async def subagent_status(task_id: str, *, ctx: ToolContext) -> ToolResult:
    """State of an async sub-agent: "running", or its envelope (status, summary, files) when done.

    Args:
        task_id: the id spawn_subagent returned, e.g. "sa-1".
    """
    r = _runner(ctx)
    return r if isinstance(r, ToolResult) else r.status(task_id)


async def message_subagent(task_id: str, message: str, *, ctx: ToolContext) -> ToolResult:
    """Send a running async sub-agent a message (a correction or an extra fact); it reads it before its
    next model call.

    Args:
        task_id: the sub-agent's id.
        message: what to tell it.
    """
    r = _runner(ctx)
    return r if isinstance(r, ToolResult) else r.message(task_id, message)


async def cancel_subagent(task_id: str, *, ctx: ToolContext) -> ToolResult:
    """Stop a running async sub-agent; returns its envelope (files written so far are listed).

    Args:
        task_id: the sub-agent's id.
    """
    r = _runner(ctx)
    return r if isinstance(r, ToolResult) else await r.cancel(task_id)


__all__ = [
    "FROM_MAIN",
    "FROM_USER",
    "SUBAGENT_SPEC",
    "TOOL_RESULT",
    "ContextMode",
    "Envelope",
    "Mode",
    "SubAgentConfig",
    "SubAgentRunner",
    "SubAgents",
    "tag_task",
]
