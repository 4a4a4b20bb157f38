"""The children of one parent session: spawn, run, steer, cancel; closed with the session.

A child is an :class:`~kairos.agent.Agent` on its own session (same store, marked as a child of
the parent). It inherits the parent's ``guard``-stage plugins' tool checks (approval, tagging of
external output) through :class:`ChildGuard`, which also restricts it to its tool subset and
tags results ``[TOOL_RESULT]``. ``message_subagent`` posts to the child's inbox; an async child
posts its envelope to the parent's inbox when it ends (no polling needed).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kairos.agent import Agent, FinalAnswer, Plugin, RunContext, RunError
from kairos.context.inbox import TaskCompleted, UserInput
from kairos.context.session import Session
from kairos.models.base import complete, estimate_tokens
from kairos.models.types import HARNESS, ArgumentsError, Message, ModelRequest, ToolCall
from kairos.plugins.subagents.envelope import (
    FROM_MAIN,
    TOOL_NAMES,
    TOOL_RESULT,
    ContextMode,
    Envelope,
    Mode,
    Status,
    shorten,
    stable_prefix,
    tag_task,
    user_texts,
)
from kairos.security.sanitize import wrap_external
from kairos.tools.base import Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    from kairos.plugins.subagents import SubAgents

PATH_ARGS = ("path", "file", "filename", "dest", "output")
BRIEF_REQUEST = (
    "[FROM_HARNESS] Write a self-contained brief for a sub-agent that cannot see this conversation. Task: {task}\n"
    "Include the goal, every fact and file path it needs from the conversation, and what its report must contain. "
    "Quote the user's own words that matter on separate lines starting with '> '. Reply with the brief only."
)


@dataclass
class _Child:
    task_id: str
    session: Session
    text: str
    agent: Agent | None = None
    artifacts: set[str] = field(default_factory=set)
    saw_external: bool = False
    task: asyncio.Task[Envelope] | None = None
    envelope: Envelope | None = None


class ChildGuard(Plugin):
    """A child's tool checks: its tool subset, the parent's guard plugins, ``[TOOL_RESULT]`` tags."""

    stage = "guard"

    def __init__(self, child: _Child, allowed: set[str], parent_guards: Sequence[Plugin]) -> None:
        self.child = child
        self.allowed = allowed
        self.parent_guards = list(parent_guards)

    async def before_tool(self, ctx: RunContext, call: ToolCall, tool: Tool) -> ToolResult | None:
        """Refuse tools outside the subset, then ask the parent's guards (approval)."""
        if tool.name not in self.allowed:
            names = ", ".join(sorted(self.allowed))
            return ToolResult(f"'{tool.name}' is not available to this sub-agent; its tools are: {names}.", True)
        for guard in self.parent_guards:
            verdict = await guard.before_tool(ctx, call, tool)
            if verdict is not None:
                return verdict
        return None

    async def after_tool(self, ctx: RunContext, call: ToolCall, tool: Tool | None, result: ToolResult) -> ToolResult:
        """The parent's guards (wrapping external output), then note what the child read and wrote."""
        for guard in self.parent_guards:
            result = await guard.after_tool(ctx, call, tool, result)
        if tool is not None and not result.is_error:
            if tool.external or result.metadata.get("provenance") == "external":
                self.child.saw_external = True
            if tool.side_effects:
                self.child.artifacts.update(_written_paths(call, ctx.session.tool_context))
        return result.with_content(f"{TOOL_RESULT} {result.content}")


class SubAgentRunner:
    """The children of one parent session; closed (children cancelled) with the session."""

    def __init__(self, plugin: SubAgents, parent: RunContext) -> None:
        self.plugin = plugin
        self.config = plugin.config
        self.parent = parent
        self.guards = [p for p in parent.agent.plugins if p.stage == "guard"]
        self.children: dict[str, _Child] = {}
        self._count = 0

    # -- tool entry points --

    async def spawn(self, task: str, tools: list[str] | None, mode: Mode, context: ContextMode) -> ToolResult:
        """Start a child; sync waits for its envelope, async returns its task id."""
        running = sum(1 for c in self.children.values() if c.envelope is None)
        if running >= self.config.max_running:
            return ToolResult(
                f"{running} sub-agents are already running (limit {self.config.max_running}); "
                "wait for one (its result arrives by itself) or stop one with cancel_subagent.",
                is_error=True,
            )
        allowed = self._allowed_tools(tools)
        if isinstance(allowed, ToolResult):
            return allowed
        if not task.strip():
            return ToolResult("The task is empty; describe the goal, the facts it needs and what to report.", True)
        text = task
        if context == "llm_generated":
            text = await self._brief(task)
        self._count += 1
        tagged = tag_task(text, user_texts(self.parent.session.message_list()))
        child = self._make_child(f"sa-{self._count}", tagged, allowed, context)
        self.children[child.task_id] = child
        if mode == "sync":
            envelope = await self._run(child)
            return ToolResult(envelope.render(), is_error=envelope.status == "failed")
        child.task = asyncio.create_task(self._run_and_report(child), name=f"subagent:{child.task_id}")
        return ToolResult(
            json.dumps({"task_id": child.task_id, "status": "running", "session": child.session.id})
            + "\nIt runs in the background; its result arrives as a message when it ends. "
            "subagent_status shows its progress, message_subagent steers it."
        )

    def status(self, task_id: str) -> ToolResult:
        """``running`` with its model calls so far, or the envelope."""
        child = self.children.get(task_id)
        if child is None:
            return self._unknown(task_id)
        if child.envelope is not None:
            return ToolResult(child.envelope.render())
        steps = child.session.request_count
        return ToolResult(json.dumps({"task_id": task_id, "status": "running", "model_calls": steps}))

    def message(self, task_id: str, text: str) -> ToolResult:
        """Post to the child's inbox; it reads the message at its next safe point."""
        child = self.children.get(task_id)
        if child is None:
            return self._unknown(task_id)
        if child.envelope is not None:
            return ToolResult(f"Sub-agent {task_id} already finished ({child.envelope.status}).", is_error=True)
        child.session.post(UserInput(f"{FROM_MAIN} {text}"))
        return ToolResult(f"Sent to {task_id}: it reads the message before its next model call.")

    async def cancel(self, task_id: str) -> ToolResult:
        """Stop an async child; returns its envelope."""
        child = self.children.get(task_id)
        if child is None:
            return self._unknown(task_id)
        if child.envelope is None and child.task is not None:
            child.task.cancel()
            await asyncio.gather(child.task, return_exceptions=True)
        if child.envelope is None:
            return ToolResult(f"Sub-agent {task_id} runs synchronously and cannot be cancelled here.", True)
        return ToolResult(child.envelope.render())

    async def aclose(self) -> None:
        """Cancel every running child."""
        tasks = [c.task for c in self.children.values() if c.task is not None and not c.task.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- building a child --

    def _allowed_tools(self, requested: list[str] | None) -> list[str] | ToolResult:
        parent_names = self.parent.tools.names()
        nested = self.config.allow_nested and self.plugin.depth < self.config.max_depth
        if requested is None:
            return [n for n in parent_names if n not in TOOL_NAMES]
        unknown = sorted(set(requested) - set(parent_names))
        if unknown:
            return ToolResult(
                f"Unknown tools {unknown}: a sub-agent can only get tools you have ({', '.join(parent_names)}).", True
            )
        forbidden = sorted(set(requested) & set(TOOL_NAMES))
        if forbidden and not nested:
            return ToolResult(f"Sub-agents cannot use {forbidden} (nesting is off or at its depth limit).", True)
        return [n for n in parent_names if n in requested]

    def _make_child(self, task_id: str, text: str, allowed: list[str], context: ContextMode) -> _Child:
        parent = self.parent
        pt = parent.session.tool_context
        meta = {"parent_session": parent.session.id, "subagent": task_id, "context": context, "tools": allowed}
        session = parent.new_session(f"subagent {task_id}: {text[:60]}", meta)
        session.tool_context.cwd = pt.cwd
        session.tool_context.resources.share(pt.resources, self.config.share_resources)
        child = _Child(task_id, session, text)
        guard = ChildGuard(child, set(allowed), self.guards)
        from kairos.plugins.subagents import SubAgents

        if context == "fork":
            # byte-identical prefix: the parent's system prompt, tool list, status and model settings
            child.agent = Agent(
                parent.model,
                tools=list(parent.tools),
                system=parent.system,
                plugins=[guard],
                status=parent.agent.status,
                max_iterations=self.config.max_iterations,
                max_tokens=parent.agent.max_tokens,
            )
            session.append(*stable_prefix(parent.session.message_list()))
        else:
            nested = [n for n in allowed if n in TOOL_NAMES]
            base = [t for t in parent.tools if t.name in allowed and t.name not in TOOL_NAMES]
            plugins: list[Plugin] = [guard]
            if nested:
                plugins.append(SubAgents(self.config, depth=self.plugin.depth + 1))
            child.agent = Agent(
                parent.model,
                tools=base,
                system=self.plugin.child_system(parent.system),
                plugins=plugins,
                status=parent.agent.status,
                max_iterations=self.config.max_iterations,
                max_tokens=parent.agent.max_tokens,
            )
        return child

    async def _brief(self, task: str) -> str:
        """The parent model writes the child's task from its own context (falls back to ``task``)."""
        current = self.parent.build()
        prefix = stable_prefix(current.messages[: current.stable_prefix_len])
        request = ModelRequest(
            system_static=current.system_static,
            system_deployment=current.system_deployment,
            tools=current.tools,
            messages=(*prefix, Message.user(BRIEF_REQUEST.format(task=task), HARNESS)),
            max_tokens=self.config.brief_max_tokens,
            temperature=current.temperature,
            stable_prefix_len=len(prefix),
        )
        try:
            response = await complete(self.parent.model, request)
        except Exception:  # the brief is an optimisation: the task itself still works
            return task
        brief = response.message.content.strip()
        return brief if brief and not response.message.tool_calls else task

    # -- running --

    async def _run_and_report(self, child: _Child) -> Envelope:
        """An async child: run it, then post its envelope to the parent's inbox."""
        envelope = await self._run(child)
        self.parent.post(
            TaskCompleted(child.task_id, envelope.render(), source="subagent", ok=envelope.status != "failed")
        )
        return envelope

    async def _run(self, child: _Child) -> Envelope:
        try:
            status, text = await self._drive(child, child.text)
            cap = self.config.max_summary_tokens
            for _ in range(self.config.shorten_attempts):
                if status != "completed" or estimate_tokens(text) <= cap:
                    break
                ask = (
                    f"Your report has about {estimate_tokens(text)} tokens; the limit is {cap}. Reply with the "
                    f"same report in at most {cap * 3 // 4} words: the result, key facts and file paths."
                )
                status, text = await self._drive(child, f"{FROM_MAIN} {ask}")
            truncated = estimate_tokens(text) > cap
            child.envelope = self._envelope(child, status, shorten(text, cap) if truncated else text, truncated)
        except asyncio.CancelledError:
            child.envelope = self._envelope(child, "cancelled", "Cancelled by the main agent before it finished.")
            raise
        except Exception as e:  # a child's crash is reported to the parent, never raised into its loop
            child.envelope = self._envelope(child, "failed", f"The sub-agent crashed: {type(e).__name__}: {e}")
        finally:
            await child.session.aclose()
        return child.envelope

    async def _drive(self, child: _Child, text: str) -> tuple[Status, str]:
        status: Status = "failed"
        answer = "The sub-agent ended without an answer."
        assert child.agent is not None
        async for event in child.agent.run(child.session, text):  # never left early: no aclose needed
            if isinstance(event, FinalAnswer):
                status = "completed" if event.stop_reason == "answer" else "incomplete"
                answer = event.text or f"(no report; stopped: {event.stop_reason})"
            elif isinstance(event, RunError):
                status, answer = "failed", f"The sub-agent failed: {event.message}"
        return status, answer

    def _envelope(self, child: _Child, status: Status, summary: str, truncated: bool = False) -> Envelope:
        if child.saw_external and self.plugin.wraps_external(self.parent):
            summary = wrap_external(summary, f"subagent {child.task_id}")
        artifacts = tuple(sorted(child.artifacts))
        return Envelope(child.task_id, status, summary, artifacts, child.session.id, truncated, child.saw_external)

    def _unknown(self, task_id: str) -> ToolResult:
        known = ", ".join(self.children) or "none yet"
        return ToolResult(f"No sub-agent {task_id!r} in this session (known: {known}).", is_error=True)


def _written_paths(call: ToolCall, ctx: ToolContext) -> list[str]:
    try:
        args = call.parsed_arguments()
    except ArgumentsError:
        return []
    out = []
    for key in PATH_ARGS:
        value = args.get(key)
        if isinstance(value, str) and value:
            try:
                p = ctx.resolve_path(value)
            except PermissionError:
                continue
            out.append(p.relative_to(ctx.workspace).as_posix())
    return out
