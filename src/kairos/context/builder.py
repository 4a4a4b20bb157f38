"""Builds every model request from a stable prefix, the trajectory and a trailing status.

Layout (book ch2 §3.2): ``[system static | boundary | system deployment] + [tools, fixed order]
+ trajectory (append-only) + [one trailing status message]``. Nothing dynamic ever enters the
system prompt or the tool list: time and cwd ride in the status message at the end.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from kairos.context.session import SessionView
from kairos.models.types import STATUS, Message, ModelRequest, SystemPrompt, ToolSpec
from kairos.tools.base import Resource

Clock = Callable[[], datetime]


class HasSession(Protocol):
    """Anything that carries a session (the agent's run context does)."""

    @property
    def session(self) -> SessionView:
        """The session being run."""
        ...


class TrajectoryView(Protocol):
    """A deterministic projection of the stored trajectory into what the model sees.

    Compression layers plug in here; a view must return the same output for the same input
    (its decisions are frozen in the session) so the prefix stays cacheable.
    """

    def apply(self, session: SessionView, messages: Sequence[Message]) -> Sequence[Message]:
        """The messages the model should see instead of ``messages``."""
        ...


class BasicStatus:
    """Time, working directory and the current task.

    What a model needs about "now", "here" and "what was asked" at the point of its next decision
    (recitation against goal drift). The task is the user's own words, never text from a tool.

    Args:
        clock: the time source (tests pass a fixed one); defaults to the local time.
        task_chars: the current task is shortened to this many characters; 0 leaves it out.
    """

    def __init__(self, clock: Clock | None = None, *, task_chars: int = 240) -> None:
        self.clock = clock or (lambda: datetime.now().astimezone())
        self.task_chars = task_chars

    def render(self, ctx: HasSession, lines: Sequence[str] = ()) -> str | None:
        """Time, cwd, the current request, then ``lines``."""
        session = ctx.session
        now = self.clock()
        out = [f"Time: {now:%Y-%m-%d %H:%M:%S %Z}", f"cwd: {display_path(cwd_of(session), session.workspace)}"]
        task = session_task(session)
        if task and self.task_chars:
            out.append(f"Current request: {_shorten(task, self.task_chars)}")
        return "\n".join([*out, *lines])


class NoStatus:
    """No trailing status at all (benchmarks that compare prompt tokens, tests of something else)."""

    def render(self, ctx: HasSession, lines: Sequence[str] = ()) -> str | None:
        """Always None."""
        return None


def cwd_of(session: SessionView) -> Path:
    """The session shell's current directory (the workspace until a ``cd``)."""
    return session.tool_context.cwd or session.workspace


def current_task(messages: Sequence[Message]) -> str | None:
    """The last real user message (harness-made messages and events are skipped)."""
    for m in reversed(messages):
        if m.from_user:
            return m.content
    return None


_TASK_CURSOR: Resource[tuple[int, int | None]] = Resource("kairos.current_task")


def session_task(session: SessionView) -> str | None:
    """:func:`current_task` of the session, scanning only what was appended since the last call.

    The status asks before every request; a session fed by events alone (webhooks, mail) has no user
    message, and a full scan each time would make a long session quadratic.
    """
    messages = session.message_list()
    scanned, found = session.state.get(_TASK_CURSOR) or (0, None)
    if scanned > len(messages):  # not this trajectory's cursor (the trajectory only grows)
        scanned, found = 0, None
    for i in range(len(messages) - 1, scanned - 1, -1):
        if messages[i].from_user:
            found = i
            break
    session.state.put(_TASK_CURSOR, (len(messages), found))
    return messages[found].content if found is not None else None


def newest_event(messages: Sequence[Message]) -> str | None:
    """What came in after the last real user message (a finished task, mail, a timer), or None.

    The status names it so a small model answers the event rather than the older request again.
    """
    for m in reversed(messages):
        if m.from_user or (m.role == "assistant" and not m.tool_calls):  # none since, or already answered
            return None
        if m.role == "user" and m.origin is not None and m.origin.kind in ("event", "external"):
            return m.origin.source or ("an event" if m.origin.kind == "event" else "external content")
    return None


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def status_message(text: str) -> Message:
    """The trailing ``<agent_status>`` user message."""
    return Message("user", f"<agent_status>\n{text}\n</agent_status>", origin=STATUS)


@dataclass
class ContextBuilder:
    """Assembles requests: the prefix parts are fixed here; the session, tools and status come per call."""

    system: SystemPrompt
    views: Sequence[TrajectoryView] = ()
    max_tokens: int = 1024
    temperature: float = 0.0

    def build(self, session: SessionView, tools: tuple[ToolSpec, ...], status: str | None = None) -> ModelRequest:
        """The request for the session's current trajectory, views applied, ``status`` trailing."""
        messages: Sequence[Message] = session.message_list()
        for view in self.views:
            messages = view.apply(session, messages)
        stable = tuple(messages)
        trailing = (status_message(status),) if status else ()
        return ModelRequest(
            system_static=self.system.static,
            system_deployment=self.system.deployment,
            tools=tools,
            messages=stable + trailing,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            stable_prefix_len=len(stable),
        )


@functools.lru_cache(maxsize=256)  # the status bar asks on every request, almost always the same path
def display_path(path: Path, workspace: Path) -> str:
    """``path`` as ``./sub/dir`` inside the workspace, absolute outside it."""
    try:
        rel = path.relative_to(workspace)
    except ValueError:
        return str(path)
    return "." if str(rel) == "." else "./" + rel.as_posix()
