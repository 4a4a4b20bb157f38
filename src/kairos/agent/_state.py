"""Per-session run state: the :class:`~kairos.agent.plugin.RunContext` plugins see.

Also what inbox events become, and the session's recorded tool order.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from kairos.agent.events import AgentEvent
from kairos.agent.guard import LoopGuard
from kairos.context.audit import PrefixAuditor
from kairos.context.inbox import (
    ExternalContent,
    InboxEvent,
    ParallelExchange,
    TaskCompleted,
    TimerFired,
    UserInput,
)
from kairos.context.layout import PromptLayout, digest
from kairos.context.session import Session, SessionView
from kairos.models.base import Model
from kairos.models.types import Message, ModelRequest, Origin, SystemPrompt
from kairos.security.sanitize import source_attr, wrap_external
from kairos.tools.base import Tool, ToolSet

if TYPE_CHECKING:
    from kairos.agent.agent import Agent

T = TypeVar("T")
TOOLS_KEY = "kairos.tools.v"
"""Frozen ``kairos.tools.v<n>``: the session's tool order after its n-th change."""
_MAX_TOOL_VERSIONS = 10_000


@dataclass
class RunState:
    """One agent on one session: the :class:`~kairos.agent.plugin.RunContext` plugins see."""

    agent: Agent
    live: Session
    tools: ToolSet
    fingerprints: tuple[str, ...]
    tools_version: int = 0
    auditor: PrefixAuditor = field(default_factory=PrefixAuditor)
    reports: list[AgentEvent] = field(default_factory=list)
    call_ids: set[str] = field(default_factory=set)
    deliberate: str | None = None
    """A change to the prefix made on purpose since the last request (the audit says so)."""
    guard: LoopGuard = field(default_factory=LoopGuard)
    """The running turn's loop guard (a new one per run)."""
    layout: PromptLayout = field(default_factory=PromptLayout)
    """The previous request's parts, to record the next one as a delta (the context inspector's data)."""
    added: list[dict[str, Any]] = field(default_factory=list)
    """What plugins appended at safe points since the last request: ``{plugin, at, messages}``."""

    def append_from(self, at: str) -> Callable[[Sequence[Message], str], None]:
        """How a safe point's plugin messages are appended: to the session, noting who added them where."""

        def append(messages: Sequence[Message], plugin: str) -> None:
            self.live.append(*messages)
            self.added.append({"plugin": plugin, "at": at, "messages": [digest(m.serialized()) for m in messages]})

        return append

    @property
    def session(self) -> SessionView:
        """The session, read-only for plugins."""
        return self.live

    @property
    def model(self) -> Model:
        """The agent's model."""
        return self.agent.model

    @property
    def system(self) -> SystemPrompt:
        """The effective system prompt."""
        return self.agent.system

    @property
    def max_iterations(self) -> int:
        """Model calls one run may make."""
        return self.agent.max_iterations

    def build(self) -> ModelRequest:
        """The next request as it stands (views applied, status trailing; no window check)."""
        status = self.agent.status.render(self, self.status_lines())
        return self.agent.builder.build(self.live, self.tools.specs(), status)

    def status_lines(self) -> list[str]:
        """Every plugin's status lines now, then the loop guard's."""
        return [*self.agent.pipeline.status_lines(self, self.report), *self.guard.status_lines()]

    def service(self, kind: type[T]) -> T | None:
        """A service some plugin of the agent provides."""
        return self.agent.pipeline.service(kind)

    def post(self, event: InboxEvent) -> int:
        """Post to the session's inbox."""
        return self.live.post(event)

    def new_session(self, title: str, meta: dict[str, Any]) -> Session:
        """A new session beside this one (same store and workspace), held for writing."""
        return self.live.spawn(title, meta)

    def report(self, event: AgentEvent) -> None:
        """Queue an event (a hook failure) for the run to yield at its next step."""
        self.reports.append(event)

    def flush(self) -> list[AgentEvent]:
        """Take the queued events."""
        out, self.reports = self.reports, []
        return out


def event_message(event: InboxEvent) -> Message | None:
    """The message an inbox event becomes (None for control events)."""
    if isinstance(event, UserInput):
        if event.cut_reply is None:
            return Message.user(event.text)
        heard = f"only up to here: {event.cut_reply.strip()!r}" if event.cut_reply.strip() else "none of it"
        note = f"<speech_cut>The user spoke over your last spoken reply and heard {heard}.</speech_cut>"
        return Message.user(f"{note}\n{event.text}")
    if isinstance(event, ExternalContent):
        text = wrap_external(event.text, event.source)
        return Message.user(
            f"{text}\n\n{event.guidance}" if event.guidance else text, Origin.of("external", event.source)
        )
    if isinstance(event, TaskCompleted):
        status = "completed" if event.ok else "failed"
        body = wrap_external(event.text, f"{event.source} {event.task_id}") if event.external else event.text
        text = (
            f'<task_result id="{source_attr(event.task_id)}" source="{source_attr(event.source)}" status="{status}">\n'
            f"{body}\n</task_result>"
        )
        return Message.user(text, Origin.of("event", f"{event.source} {event.task_id}"))
    if isinstance(event, TimerFired):
        text = f'<timer name="{source_attr(event.name)}">\n{event.text}\n</timer>'
        return Message.user(text, Origin.of("event", f"timer: {event.name}"))
    if isinstance(event, ParallelExchange):
        text = (
            "[Executed in parallel with the main task] The user asked a side question, already answered "
            f"(no need to answer it again):\nQuestion: {event.question}\nAnswer given: {event.answer}"
        )
        return Message.user(text, Origin.of("event", "parallel"))
    return None


_BATCH_NAMES = {
    "user_input": ("user message", "user messages"),
    "external": ("external message", "external messages"),
    "task_completed": ("task result", "task results"),
    "timer": ("timer", "timers"),
    "parallel": ("parallel exchange", "parallel exchanges"),
}


def mark_batch(messages: list[Message], kinds: list[str]) -> list[Message]:
    """Number events taken up together and sum them up by type (book ch6 §3.3, §6.2).

    With several events in one batch a model tends to answer only the last one; the
    ``[Unprocessed Event i/N]`` markers and the closing count keep all of them in view.
    """
    n = len(messages)
    if n < 2:
        return messages
    counts: dict[str, int] = {}
    for kind in kinds:
        counts[kind] = counts.get(kind, 0) + 1
    parts = []
    for kind, count in counts.items():
        one, many = _BATCH_NAMES.get(kind, ("event", "events"))
        parts.append(f"{count} {one if count == 1 else many}")
    listing = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    summary = (
        f"\n\nAbove are {n} unprocessed events, including {listing}. "
        "Please make sure your response covers all the information."
    )
    out = []
    for i, m in enumerate(messages, 1):
        content = f"[Unprocessed Event {i}/{n}] {m.content}" + (summary if i == n else "")
        out.append(dataclasses.replace(m, content=content))
    return out


def restore_order(session: Session, tools: list[Tool]) -> tuple[ToolSet, int]:
    """The session's tool order as last recorded (new tools appended), or name order for a new session."""
    version = 0
    names: list[str] | None = None
    for n in range(1, _MAX_TOOL_VERSIONS):
        raw = session.frozen(f"{TOOLS_KEY}{n}")
        if raw is None:
            break
        version, names = n, json.loads(raw)
    if names is None:
        return ToolSet.sorted(tools), 0
    by_name = {t.name: t for t in tools}
    snapshot, _ = ToolSet([by_name[n] for n in names if n in by_name]).updated(tools)
    return snapshot, version
