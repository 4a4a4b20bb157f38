"""Per-session run state: the :class:`~kairos.agent.plugin.RunContext` plugins see.

Also what inbox events become, and the session's recorded tool order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from kairos.agent.events import AgentEvent
from kairos.context.audit import PrefixAuditor
from kairos.context.inbox import ExternalContent, InboxEvent, TaskCompleted, TimerFired, UserInput
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
        """Every plugin's status lines now."""
        return self.agent.pipeline.status_lines(self, self.report)

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
        return Message.user(event.text)
    if isinstance(event, ExternalContent):
        return Message.user(wrap_external(event.text, event.source), Origin("external", event.source))
    if isinstance(event, TaskCompleted):
        status = "completed" if event.ok else "failed"
        body = wrap_external(event.text, f"{event.source} {event.task_id}") if event.external else event.text
        text = (
            f'<task_result id="{source_attr(event.task_id)}" source="{source_attr(event.source)}" status="{status}">\n'
            f"{body}\n</task_result>"
        )
        return Message.user(text, Origin("event", f"{event.source} {event.task_id}"))
    if isinstance(event, TimerFired):
        text = f'<timer name="{source_attr(event.name)}">\n{event.text}\n</timer>'
        return Message.user(text, Origin("event", f"timer: {event.name}"))
    return None


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
