"""Structured events: the one shape every input takes before it reaches a session (book ch6 §3.2, §6.1).

An :class:`Event` says who sent it (``source``), how it came (``channel``), what it says
(``content``) and its background (``context``). Sources (timers, webhooks, mail, file watches,
async tools, the CLI and HTTP front ends) build events; the runtime routes each to a session,
decides its strategy (:mod:`kairos.runtime.urgency`) and posts the matching inbox event, so the
agent never confuses user input with a tool result or external content.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from kairos.context.inbox import ExternalContent, InboxEvent, Interrupt, TaskCompleted, TimerFired, UserInput

Strategy: TypeAlias = Literal["interrupt", "queue", "parallel", "drop"]
"""What to do with an event (ch6 §3.2): force an early safe point, wait for the next one, answer it
in a side session beside the main task, or ignore it (a filter rule matched)."""
STRATEGIES: tuple[Strategy, ...] = ("interrupt", "queue", "parallel", "drop")

CUT_REPLY = "cut_reply"
"""A user event's context key: the user spoke over the last spoken reply and heard it only up to this text."""
USER_TYPES = ("user.input", "user.interrupt")
"""Event types whose content is the user's own words (everything else is data, never instructions)."""
URGENT_TYPES = ("user.interrupt", "supervisor.instruction", "agent.interrupt")
"""Urgent by default (ch6 §3.2); an external event is urgent when its source marks it so."""


@dataclass(frozen=True, slots=True)
class Event:
    """One input from the world.

    ``type`` is dotted (``user.input``, ``email.received``, ``webhook.received``, ``timer.trigger``,
    ``async.result``, ``file.changed``, ``shell.match``, ``heartbeat`` …); ``id`` is the event's
    idempotency key: an id seen before is acknowledged again but queued only once.
    """

    type: str
    content: str
    source: Mapping[str, str] = field(default_factory=dict)
    """Who: ``{"type": "email", "sender": "client@example.com"}``."""
    channel: str = ""
    """How: ``imap``, ``webhook``, ``timer``, ``cli``, ``http``, ``shell`` …"""
    context: Mapping[str, Any] = field(default_factory=dict)
    """Background the agent should not have to ask for: subject, priority, related ids."""
    session: str | None = None
    """The session it is for; None lets the runtime route it (its default session)."""
    id: str = ""
    strategy: Strategy | None = None
    """Forced by the sender (e.g. an alert marked urgent → ``interrupt``); else the router decides."""

    @property
    def from_user(self) -> bool:
        """Whether the content is the user's own words."""
        return self.type in USER_TYPES

    @property
    def kind(self) -> str:
        """What it is in a word: the source's type (``email``), else the type's first part."""
        return self.source.get("type") or self.type.split(".")[0]

    def label(self) -> str:
        """``email from client@example.com`` style: where it came from, for the wrapper and logs."""
        who = self.source.get("sender") or self.source.get("name") or ""
        return f"{self.kind} from {who}" if who else self.kind

    def to_record(self) -> dict[str, Any]:
        """A JSON-able dict (the HTTP API's and the bus's form)."""
        return {
            "type": self.type,
            "content": self.content,
            "source": dict(self.source),
            "channel": self.channel,
            "context": dict(self.context),
            "session": self.session,
            "id": self.id,
            "strategy": self.strategy,
        }

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> Event:
        """Parse a dict (e.g. a webhook body).

        Raises:
            ValueError: a missing or mistyped field, with what is wrong.
        """
        kind, content = data.get("type"), data.get("content")
        if not isinstance(kind, str) or not kind.strip():
            raise ValueError("'type' must be a non-empty string such as 'webhook.received'")
        if isinstance(content, (dict, list)):
            content = json.dumps(content, ensure_ascii=False)
        if not isinstance(content, str):
            raise ValueError("'content' must be a string (or a JSON object, kept as its text)")
        source, context = data.get("source") or {}, data.get("context") or {}
        if not isinstance(source, dict) or not all(isinstance(v, str) for v in source.values()):
            raise ValueError('\'source\' must be an object of strings, e.g. {"type": "github", "sender": "ci"}')
        if not isinstance(context, dict):
            raise ValueError("'context' must be an object")
        strategy = data.get("strategy")
        if strategy is not None and strategy not in STRATEGIES:
            raise ValueError(f"'strategy' must be one of {', '.join(STRATEGIES)}")
        session, event_id, channel = data.get("session"), data.get("id", ""), data.get("channel", "")
        for name, value in (("session", session), ("id", event_id), ("channel", channel)):
            if value is not None and not isinstance(value, str):
                raise ValueError(f"'{name}' must be a string")
        return cls(kind.strip(), content, source, channel or "", context, session, event_id or "", strategy)


def matches(event: Event, type: str = "*", source: str = "*", sender: str = "*", keywords: Sequence[str] = ()) -> bool:
    """Whether ``event`` fits: type, source type and sender globs (sender case-insensitive), any keyword."""
    if not fnmatch.fnmatchcase(event.type, type):
        return False
    if not fnmatch.fnmatchcase(event.source.get("type", ""), source):
        return False
    if not fnmatch.fnmatchcase(event.source.get("sender", "").lower(), sender.lower()):
        return False
    if keywords:
        text = (event.content + " " + json.dumps(dict(event.context), ensure_ascii=False)).lower()
        return any(k.lower() in text for k in keywords)
    return True


def idempotency_key(session_id: str, event: Event) -> str | None:
    """The inbox key of ``event.id``, scoped to its session and channel (None: the event has no id).

    A key is the sender's: the same one sent to another session, or by another route (a webhook's id,
    an HTTP ``Idempotency-Key``), is another request, not a duplicate of this one.
    """
    return f"{event.channel or '-'}/{session_id}/{event.id}" if event.id else None


def same_payload(stored: Mapping[str, Any] | None, posted: Mapping[str, Any]) -> bool:
    """Whether an inbox record posted before under a key carries the same request as ``posted``.

    How urgently each was taken (``urgent``, which depends on whether the session was busy) is not
    part of the request.
    """
    if stored is None:
        return True
    return {k: v for k, v in stored.items() if k != "urgent"} == {k: v for k, v in posted.items() if k != "urgent"}


def render(event: Event) -> str:
    """The text the model reads for a non-user event: context lines (empty ones left out), then the content."""
    lines = [f"event: {event.type}"]
    if event.channel:
        lines.append(f"channel: {event.channel}")
    for key, value in event.context.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if text.strip():
            lines.append(f"{key}: {text}")
    return "\n".join(lines) + "\n\n" + event.content


def inbox_event(event: Event, strategy: Strategy, guidance: str = "") -> InboxEvent:
    """The inbox event a routed event becomes; ``interrupt`` makes it preempt the running step.

    A bare ``user.interrupt`` without text is a stop request (it ends the running turn).
    ``guidance`` (a handler's instructions, see :mod:`kairos.runtime.handlers`) follows external content.
    """
    urgent = strategy == "interrupt"
    if event.type == "user.interrupt" and not event.content.strip():
        return Interrupt("immediate", reason=event.label())
    if event.from_user:
        cut = event.context.get(CUT_REPLY)
        return UserInput(event.content, urgent=urgent, cut_reply=cut if isinstance(cut, str) else None)
    if event.type == "timer.trigger":
        return TimerFired(str(event.context.get("timer") or event.source.get("name") or "timer"), event.content)
    if event.type == "async.result":
        return TaskCompleted(
            str(event.context.get("task_id", "")),
            event.content,
            source=event.source.get("name", "task"),
            ok=event.context.get("status", "completed") == "completed",
        )
    return ExternalContent(event.label(), render(event), urgent=urgent, guidance=guidance)


__all__ = [
    "STRATEGIES",
    "URGENT_TYPES",
    "USER_TYPES",
    "Event",
    "Strategy",
    "idempotency_key",
    "inbox_event",
    "matches",
    "render",
    "same_payload",
]
