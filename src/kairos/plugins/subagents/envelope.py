"""What crosses between a main agent and its sub-agents: settings, the task's source tags and the envelope.

The parent receives only an :class:`Envelope` (status, a capped summary, the files the child
wrote), never the child's messages. A child's task tags sources: ``[FROM_MAIN_AGENT]`` for the
parent's words, ``[FROM_USER]`` for quotes checked against the real user messages (so the parent
cannot forge user authority), ``[TOOL_RESULT]`` on every tool result.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from kairos.models.types import Message

FROM_MAIN = "[FROM_MAIN_AGENT]"
FROM_USER = "[FROM_USER]"
TOOL_RESULT = "[TOOL_RESULT]"
TOOL_NAMES = ("cancel_subagent", "message_subagent", "spawn_subagent", "subagent_status")

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
        """The JSON the parent reads."""
        data: dict[str, object] = {"task_id": self.task_id, "status": self.status, "summary": self.summary}
        data["artifacts"] = list(self.artifacts)
        data.update({k: True for k in ("truncated", "external_input") if getattr(self, k)})
        data["session"] = self.session_id
        return json.dumps(data, ensure_ascii=False)


def _norm(text: str) -> str:
    return " ".join(text.strip().strip("\"'“”").split()).lower()


def tag_task(text: str, user_messages: Sequence[str]) -> str:
    """The child's task message, each line tagged with who said it.

    Main-agent text goes under ``[FROM_MAIN_AGENT]``, verified quotes (lines starting with ``>``
    or ``[FROM_USER]``) under ``[FROM_USER]``. A quote that is not in any real user message stays
    main-agent text, so the parent cannot forge user authority.

    Args:
        text: the task as the parent agent wrote it.
        user_messages: the user's real messages to the parent (see :func:`user_texts`).
    """
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


def user_texts(messages: Sequence[Message]) -> list[str]:
    """The contents of the messages the user wrote (not tool output, not harness messages)."""
    return [m.content for m in messages if m.from_user]


def stable_prefix(messages: Sequence[Message]) -> list[Message]:
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
