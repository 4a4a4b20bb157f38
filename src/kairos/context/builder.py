"""Builds every model request from a stable prefix, the trajectory and a trailing status.

Layout (book ch2 §3.2): ``[system static | boundary | system deployment] + [tools, fixed order]
+ trajectory (append-only) + [one trailing status message]``. Nothing dynamic ever enters the
system prompt or the tool list: time and cwd ride in the status message at the end.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Protocol

from kairos.context.session import Session
from kairos.errors import ContextOverflowError
from kairos.models.base import Model
from kairos.models.types import STATUS, Message, ModelRequest, SystemPrompt, ToolSpec


class StatusProvider(Protocol):
    """Computes the trailing status text for the next request (code, never the model)."""

    def render(self, session: Session) -> str | None: ...


class TrajectoryView(Protocol):
    """A deterministic projection of the stored trajectory into what the model sees.

    Compression layers plug in here; a view must return the same output for the same input
    (its decisions are frozen in the session) so the prefix stays cacheable.
    """

    def apply(self, session: Session, messages: Sequence[Message]) -> Sequence[Message]: ...


Clock = Callable[[], datetime]


class BasicStatus:
    """Time, working directory and the current task: what a model needs about "now", "here"
    and "what was asked" at the point of its next decision (recitation against goal drift).
    The task is the user's own words, never text from a tool."""

    def __init__(self, clock: Clock | None = None, *, task_chars: int = 240) -> None:
        self.clock = clock or (lambda: datetime.now().astimezone())
        self.task_chars = task_chars

    def render(self, session: Session) -> str | None:
        now = self.clock()
        cwd = session.tool_context.cwd or session.workspace
        lines = [f"Time: {now:%Y-%m-%d %H:%M:%S %Z}", f"cwd: {_display_path(cwd, session.workspace)}"]
        task = current_task(session.message_list())
        if task and self.task_chars:
            lines.append(f"Current request: {_shorten(task, self.task_chars)}")
        return "\n".join(lines)


def current_task(messages: Sequence[Message]) -> str | None:
    """The last real user message (harness-made status messages are skipped)."""
    for m in reversed(messages):
        if m.from_user:
            return m.content
    return None


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def status_message(text: str) -> Message:
    return Message("user", f"<agent_status>\n{text}\n</agent_status>", origin=STATUS)


OverflowHook = Callable[[Session, ModelRequest, int, int], Awaitable[ModelRequest | None]]
"""Called when a request is over budget with (session, request, tokens, limit); returns a
smaller request (e.g. after compression) or None to give up."""


class ContextBuilder:
    """Assembles requests for one agent; holds no per-session state."""

    def __init__(
        self,
        system: SystemPrompt,
        tools: Sequence[ToolSpec] = (),
        *,
        status: StatusProvider | None = None,
        views: Sequence[TrajectoryView] = (),
        max_tokens: int = 1024,
        temperature: float = 0.0,
    ) -> None:
        self.system = system
        self.tools = tuple(tools)
        self.status = status if status is not None else BasicStatus()
        self.views = list(views)
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.overflow_hooks: list[OverflowHook] = []

    def build(self, session: Session) -> ModelRequest:
        messages: Sequence[Message] = session.message_list()
        for view in self.views:
            messages = view.apply(session, messages)
        stable = tuple(messages)
        text = self.status.render(session) if self.status else None
        trailing = (status_message(text),) if text else ()
        return ModelRequest(
            system_static=self.system.static,
            system_deployment=self.system.deployment,
            tools=self.tools,
            messages=stable + trailing,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            stable_prefix_len=len(stable),
        )

    async def build_within_budget(self, session: Session, model: Model) -> tuple[ModelRequest, int]:
        """Build, count tokens with the model's tokenizer, and shrink or refuse if over the window.

        Raises:
            ContextOverflowError: still over the window after every overflow hook ran.
        """
        request = self.build(session)
        limit = model.context_window - request.max_tokens
        tokens = model.count_tokens(request)
        for hook in self.overflow_hooks:
            if tokens <= limit:
                break
            smaller = await hook(session, request, tokens, limit)
            if smaller is not None:
                request, tokens = smaller, model.count_tokens(smaller)
        if tokens > limit:
            raise ContextOverflowError(
                f"the request needs {tokens} prompt tokens but {model.name} allows {limit} "
                f"({model.context_window} window - {request.max_tokens} reserved for the reply). "
                "Start a new session, raise the window (e.g. --ctx), or enable compression.",
                prompt_tokens=tokens,
                limit=limit,
            )
        return request, tokens


def _display_path(path: Path, workspace: Path) -> str:
    try:
        rel = path.relative_to(workspace)
    except ValueError:
        return str(path)
    return "." if str(rel) == "." else "./" + rel.as_posix()


def system_facts() -> str:
    """OS and shell facts for the deployment part of the system prompt (stable per machine)."""
    return f"OS: {os.uname().sysname}; shell: {os.environ.get('SHELL', '/bin/sh')}"
