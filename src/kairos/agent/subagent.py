"""Sub-agents: isolation instead of compression (book ch2 §3.13, §3.5 point 2).

``spawn_subagent`` runs a child :class:`~kairos.agent.loop.Agent` in its own session (same store,
marked as a child of the parent). The parent receives only an :class:`Envelope` (status, a summary
capped at a few hundred tokens, the files the child wrote), never the child's messages. Context:
``minimal`` (the task as written), ``llm_generated`` (the parent model first writes a brief in a side
query sharing its prefix) or ``fork`` (a byte-identical prefix: same system prompt, tools, model
settings and trajectory, so the prompt cache is shared; the tool subset is then enforced at call
time). Child prompts tag sources ``[FROM_MAIN_AGENT]``, ``[FROM_USER]`` (quotes checked against the
real user messages) and ``[TOOL_RESULT]``. Async children are tasks owned by a per-session runner,
cancelled when the session closes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from kairos.agent.events import FinalAnswer, RunError
from kairos.agent.loop import Agent
from kairos.context.session import Session
from kairos.models.base import complete, estimate_tokens
from kairos.models.types import HARNESS, Message, ModelRequest, SystemPrompt, ToolCall
from kairos.prompts.builder import SUBAGENT_SPEC, PromptBuilder
from kairos.security.defences import InjectionDefences
from kairos.security.sanitize import wrap_external
from kairos.tools.base import Tool, ToolContext, ToolResult, make_tool

FROM_MAIN = "[FROM_MAIN_AGENT]"
FROM_USER = "[FROM_USER]"
TOOL_RESULT = "[TOOL_RESULT]"
RUNNER_KEY = "kairos.subagents"
TOOL_NAMES = ("cancel_subagent", "message_subagent", "spawn_subagent", "subagent_status")
PATH_ARGS = ("path", "file", "filename", "dest", "output")

Mode: TypeAlias = Literal["sync", "async"]
ContextMode: TypeAlias = Literal["minimal", "llm_generated", "fork"]
Status: TypeAlias = Literal["completed", "incomplete", "failed", "cancelled"]


class SubAgentConfig(BaseModel):
    """``[subagents]`` in kairos.toml."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="offer spawn_subagent and its companion tools")
    max_summary_tokens: int = Field(300, ge=20, description="cap on the summary the parent receives")
    shorten_attempts: int = Field(1, ge=0, description="times the child is asked to shorten before truncation")
    max_iterations: int = Field(12, ge=1, description="model calls a child may make")
    max_running: int = Field(4, ge=1, description="children running at once (sync and async)")
    timeout_s: float = Field(900.0, gt=0, description="limit for a sync spawn_subagent call")
    brief_max_tokens: int = Field(400, ge=50, description="reply budget of the llm_generated brief")
    allow_nested: bool = Field(False, description="let children spawn children (bounded by max_depth)")
    max_depth: int = Field(2, ge=1)
    share_resources: list[str] = Field(
        default_factory=lambda: ["clock", "kairos.security.log"],
        description="parent ToolContext resources a child sees (e.g. a simulated clock)",
    )


BRIEF_REQUEST = (
    "[FROM_HARNESS] Write a self-contained brief for a sub-agent that cannot see this conversation. Task: {task}\n"
    "Include the goal, every fact and file path it needs from the conversation, and what its report must contain. "
    "Quote the user's own words that matter on separate lines starting with '> '. Reply with the brief only."
)


@dataclass(frozen=True, slots=True)
class Envelope:
    """All the parent ever sees of a child."""

    task_id: str
    status: Status
    summary: str
    artifacts: tuple[str, ...] = ()
    session_id: str = ""
    truncated: bool = False
    external_input: bool = False
    """The child read external content, so the summary may carry its text."""

    def render(self) -> str:
        data: dict[str, object] = {"task_id": self.task_id, "status": self.status, "summary": self.summary}
        data["artifacts"] = list(self.artifacts)
        data.update({k: True for k in ("truncated", "external_input") if getattr(self, k)})
        data["session"] = self.session_id
        return json.dumps(data, ensure_ascii=False)


@dataclass
class _Child:
    task_id: str
    session: Session
    agent: Agent
    text: str
    inbox: list[str] = field(default_factory=list)
    artifacts: set[str] = field(default_factory=set)
    saw_external: bool = False
    task: asyncio.Task[Envelope] | None = None
    envelope: Envelope | None = None


def _norm(text: str) -> str:
    return " ".join(text.strip().strip("\"'“”").split()).lower()


def tag_task(text: str, user_messages: Sequence[str]) -> str:
    """The child's task message: main-agent text under ``[FROM_MAIN_AGENT]``, verified quotes
    (lines starting with ``>`` or ``[FROM_USER]``) under ``[FROM_USER]``. A quote that is not in
    any real user message stays main-agent text, so the parent cannot forge user authority."""
    users = [_norm(u) for u in user_messages]
    groups: list[tuple[str, list[str]]] = []
    for line in text.strip().splitlines():
        stripped = line.strip()
        quote = None
        if stripped.startswith(">"):
            quote = stripped.lstrip(">").strip()
        elif stripped.startswith(FROM_USER):
            quote = stripped[len(FROM_USER) :].strip()
        if quote and any(_norm(quote) in u for u in users):
            tag, line = FROM_USER, quote
        else:
            tag = FROM_MAIN
            if quote:
                line = f"(quote not found in the user's messages) {quote}"
        if groups and groups[-1][0] == tag:
            groups[-1][1].append(line)
        else:
            groups.append((tag, [line]))
    return "\n".join(f"{tag} " + "\n".join(lines) for tag, lines in groups) if groups else FROM_MAIN


def _user_texts(messages: Sequence[Message]) -> list[str]:
    return [m.content for m in messages if m.from_user]


def _stable_prefix(messages: Sequence[Message]) -> list[Message]:
    """The parent's messages as of its last request: without the reply whose calls are running."""
    msgs = list(messages)
    if msgs and msgs[-1].role == "assistant" and msgs[-1].tool_calls:
        msgs.pop()
    return msgs


def shorten(text: str, max_tokens: int) -> str:
    """Cut at a word boundary to about ``max_tokens`` (the estimate used for the cap)."""
    limit = max_tokens * 4 - 16
    cut = text[:limit].rsplit(" ", 1)[0] if " " in text[:limit] else text[:limit]
    return cut.rstrip() + " … [truncated]"


class SubAgentRunner:
    """The children of one parent session; closed (children cancelled) with the session."""

    def __init__(self, ext: SubAgents, parent_agent: Agent, parent: Session) -> None:
        self.ext = ext
        self.config = ext.config
        self.parent_agent = parent_agent
        self.parent = parent
        self.children: dict[str, _Child] = {}
        self._count = 0

    # -- tool entry points --

    async def spawn(self, task: str, tools: list[str] | None, mode: Mode, context: ContextMode) -> ToolResult:
        running = sum(1 for c in self.children.values() if c.envelope is None)
        if running >= self.config.max_running:
            return ToolResult(
                f"{running} sub-agents are already running (limit {self.config.max_running}); "
                "wait for one with subagent_status or stop one with cancel_subagent.",
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
        child = self._make_child(
            f"sa-{self._count}", tag_task(text, _user_texts(self.parent.messages)), allowed, context
        )
        self.children[child.task_id] = child
        if mode == "sync":
            envelope = await self._run(child)
            return ToolResult(envelope.render(), is_error=envelope.status == "failed")
        child.task = asyncio.create_task(self._run(child), name=f"subagent:{child.task_id}")
        return ToolResult(
            json.dumps({"task_id": child.task_id, "status": "running", "session": child.session.id})
            + "\nIt runs in the background: check it with subagent_status, steer it with message_subagent."
        )

    def status(self, task_id: str) -> ToolResult:
        child = self.children.get(task_id)
        if child is None:
            return self._unknown(task_id)
        if child.envelope is not None:
            return ToolResult(child.envelope.render())
        steps = child.session.request_count
        return ToolResult(json.dumps({"task_id": task_id, "status": "running", "model_calls": steps}))

    def message(self, task_id: str, text: str) -> ToolResult:
        child = self.children.get(task_id)
        if child is None:
            return self._unknown(task_id)
        if child.envelope is not None:
            return ToolResult(f"Sub-agent {task_id} already finished ({child.envelope.status}).", is_error=True)
        child.inbox.append(text)
        return ToolResult(f"Queued for {task_id}: it reads the message before its next model call.")

    async def cancel(self, task_id: str) -> ToolResult:
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
        tasks = [c.task for c in self.children.values() if c.task is not None and not c.task.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- building a child --

    def _allowed_tools(self, requested: list[str] | None) -> list[str] | ToolResult:
        parent_names = self.parent_agent.tools.names()
        nested = self.config.allow_nested and self.ext.depth < self.config.max_depth
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
        parent, pa = self.parent, self.parent_agent
        sid = parent.store.create_session(
            f"subagent {task_id}: {text[:60]}",
            meta={"parent_session": parent.id, "subagent": task_id, "context": context, "tools": allowed},
        )
        session = Session(sid, parent.store, parent.workspace, [])
        session.tool_context.cwd = parent.tool_context.cwd
        for key in self.config.share_resources:
            if key in parent.tool_context.resources:
                session.tool_context.resources[key] = parent.tool_context.resources[key]
        if context == "fork":
            # byte-identical prefix: the parent's builder (system, tools, model settings) and messages
            agent = Agent(pa.model, tools=list(pa.tools), builder=pa.builder, max_iterations=self.config.max_iterations)
            session.append(*_stable_prefix(parent.messages))
        else:
            nested = [n for n in allowed if n in TOOL_NAMES]
            base = [t for t in pa.tools if t.name in allowed and t.name not in TOOL_NAMES]
            exts = [SubAgents(self.config, depth=self.ext.depth + 1)] if nested else []
            agent = Agent(
                pa.model,
                tools=base,
                system=self.ext.child_system(pa.builder.system),
                status=pa.builder.status,
                max_iterations=self.config.max_iterations,
                max_tokens=pa.builder.max_tokens,
                extensions=exts,
            )
        child = _Child(task_id, session, agent, text)
        self._wire(child, set(allowed), pa)
        return child

    def _wire(self, child: _Child, allowed: set[str], pa: Agent) -> None:
        """Inherit the parent's tool hooks (approval, tagging), then restrict and tag."""

        async def restrict(call: ToolCall, t: Tool, ctx: ToolContext) -> ToolResult | None:
            if t.name in allowed:
                return None
            return ToolResult(
                f"'{t.name}' is not available to this sub-agent; its tools are: {', '.join(sorted(allowed))}.", True
            )

        def tag(call: ToolCall, t: Tool | None, result: ToolResult, ctx: ToolContext) -> ToolResult:
            if t is not None and not result.is_error:
                if t.external or result.metadata.get("provenance") == "external":
                    child.saw_external = True
                if t.side_effects:
                    child.artifacts.update(_written_paths(call, ctx))
            return ToolResult(f"{TOOL_RESULT} {result.content}", result.is_error, result.metadata)

        async def deliver(session: Session) -> None:
            while child.inbox:
                session.append(Message.user(f"{FROM_MAIN} {child.inbox.pop(0)}"))

        ex = child.agent.executor
        ex.before[:0] = [restrict, *pa.executor.before]
        ex.after[:0] = list(pa.executor.after)
        ex.after.append(tag)
        child.agent.before_request.insert(0, deliver)

    async def _brief(self, task: str) -> str:
        """The parent model writes the child's task from its own context (falls back to ``task``)."""
        pa, session = self.parent_agent, self.parent
        msgs: Sequence[Message] = session.message_list()
        for view in pa.builder.views:
            msgs = view.apply(session, msgs)
        prefix = _stable_prefix(msgs)
        request = ModelRequest(
            system_static=pa.builder.system.static,
            system_deployment=pa.builder.system.deployment,
            tools=pa.builder.tools,
            messages=(*prefix, Message("user", BRIEF_REQUEST.format(task=task), origin=HARNESS)),
            max_tokens=self.config.brief_max_tokens,
            temperature=pa.builder.temperature,
            stable_prefix_len=len(prefix),
        )
        try:
            response = await complete(pa.model, request)
        except Exception:  # the brief is an optimisation: the task itself still works
            return task
        brief = response.message.content.strip()
        return brief if brief and not response.message.tool_calls else task

    # -- running --

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
        async for event in child.agent.run(child.session, text):  # never left early: no aclose needed
            if isinstance(event, FinalAnswer):
                status = "completed" if event.stop_reason == "answer" else "incomplete"
                answer = event.text or f"(no report; stopped: {event.stop_reason})"
            elif isinstance(event, RunError):
                status, answer = "failed", f"The sub-agent failed: {event.message}"
        return status, answer

    def _envelope(self, child: _Child, status: Status, summary: str, truncated: bool = False) -> Envelope:
        if child.saw_external and self.ext.wraps_external():
            summary = wrap_external(summary, f"subagent {child.task_id}")
        artifacts = tuple(sorted(child.artifacts))
        return Envelope(child.task_id, status, summary, artifacts, child.session.id, truncated, child.saw_external)

    def _unknown(self, task_id: str) -> ToolResult:
        known = ", ".join(self.children) or "none yet"
        return ToolResult(f"No sub-agent {task_id!r} in this session (known: {known}).", is_error=True)


def _written_paths(call: ToolCall, ctx: ToolContext) -> list[str]:
    try:
        args = json.loads(call.arguments) if call.arguments.strip() else {}
    except json.JSONDecodeError:
        return []
    out = []
    for key in PATH_ARGS:
        value = args.get(key) if isinstance(args, dict) else None
        if isinstance(value, str) and value:
            try:
                p = ctx.resolve_path(value)
            except PermissionError:
                continue
            out.append(p.relative_to(ctx.workspace).as_posix())
    return out


class SubAgents:
    """The extension: four tools plus a runner per parent session."""

    def __init__(self, config: SubAgentConfig | None = None, *, depth: int = 0) -> None:
        self.config = config or SubAgentConfig()
        self.depth = depth
        self.agent: Agent | None = None
        self._prompt = PromptBuilder(SUBAGENT_SPEC, volatile=(str(Path.home()),))

    def child_system(self, parent: SystemPrompt) -> SystemPrompt:
        """Static sub-agent prompt (shared by every child) + the parent's deployment part + the cap."""
        words = self.config.max_summary_tokens * 3 // 4
        limit = f"Report limit: at most {words} words."
        deployment = f"{parent.deployment}\n{limit}" if parent.deployment else limit
        return SystemPrompt(self._prompt.static(), deployment)

    def wraps_external(self) -> bool:
        """Whether the parent tags external content (then a child that read some is tagged too)."""
        if self.agent is None:
            return False
        return any(isinstance(e, InjectionDefences) and e.config.tag_external for e in self.agent.extensions)

    def install(self, agent: Agent) -> None:
        self.agent = agent

        async def ensure_runner(session: Session) -> None:
            if RUNNER_KEY not in session.tool_context.resources:
                session.tool_context.resources[RUNNER_KEY] = SubAgentRunner(self, agent, session)

        agent.before_request.append(ensure_runner)

    def tools(self) -> Sequence[Tool]:
        if not self.config.enabled:
            return ()
        return (
            make_tool(spawn_subagent, timeout_s=self.config.timeout_s),
            make_tool(subagent_status),
            make_tool(message_subagent),
            make_tool(cancel_subagent),
        )


def _runner(ctx: ToolContext) -> SubAgentRunner | ToolResult:
    r = ctx.resources.get(RUNNER_KEY)
    if isinstance(r, SubAgentRunner):
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
        mode: "sync" waits for the envelope; "async" returns a task id at once (see subagent_status).
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
    "Envelope",
    "SubAgentConfig",
    "SubAgentRunner",
    "SubAgents",
    "tag_task",
]
