"""Urgency: which strategy an event gets (book ch6 §3.2 "Urgency determination").

Rules first (source, sender, keywords, type; first match wins), then the defaults of the book
(``user.interrupt``, ``supervisor.instruction`` and ``agent.interrupt`` interrupt, everything else
queues). An optional classifier on a small model decides user messages no rule matched, by
meaning: "Stop immediately!" → interrupt, "What's the weather today?" → parallel (while a task
runs), "Send the report in Chinese" → queue. The classifier answers through a one-tool schema, so
its output is an enum, and any failure or slowness falls back to the rules' answer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kairos.models.base import Model, try_complete
from kairos.models.types import Message, ModelRequest, ToolSpec
from kairos.runtime.events import STRATEGIES, URGENT_TYPES, Event, Strategy, matches

log = logging.getLogger("kairos.runtime")


@dataclass(frozen=True, slots=True)
class UrgencyRule:
    """Match an event by type, source type, sender (globs) and keywords (any, case-insensitive)."""

    strategy: Strategy
    type: str = "*"
    source: str = "*"
    sender: str = "*"
    keywords: tuple[str, ...] = ()

    def matches(self, event: Event) -> bool:
        """Whether every given condition holds for ``event``."""
        return matches(event, self.type, self.source, self.sender, self.keywords)


@dataclass(frozen=True, slots=True)
class Decision:
    """A strategy and why it was chosen (shown in the trace and the event stream)."""

    strategy: Strategy
    reason: str


class Router(Protocol):
    """Decides the strategy of an event; ``busy`` says whether the session is working on a turn."""

    async def decide(self, event: Event, *, busy: bool) -> Decision:
        """The strategy for ``event``."""
        ...


@dataclass
class RuleRouter:
    """Rules, then the book's defaults; ``classifier`` (optional) for user messages no rule matched."""

    rules: Sequence[UrgencyRule] = ()
    classifier: Classifier | None = None

    async def decide(self, event: Event, *, busy: bool) -> Decision:
        """See the module docstring; ``parallel`` only makes sense while the session is busy."""
        decision = self._decide_by_rules(event)
        if decision is None and self.classifier is not None and event.type == "user.input" and busy:
            decision = await self.classifier.classify(event)
        if decision is None:
            decision = Decision("interrupt" if event.type in URGENT_TYPES else "queue", f"default for {event.type}")
        if decision.strategy == "parallel" and not busy:
            return Decision("queue", decision.reason + " (nothing runs: answered in the session itself)")
        return decision

    def _decide_by_rules(self, event: Event) -> Decision | None:
        if event.strategy is not None:
            return Decision(event.strategy, "set by the sender")
        for i, rule in enumerate(self.rules):
            if rule.matches(event):
                return Decision(rule.strategy, f"rule {i + 1}")
        return None


_CLASSIFY_SYSTEM = (
    "You route messages a user sends while an assistant is busy with a task. Choose one strategy:\n"
    "- interrupt: the user wants the current work stopped or changed now (stop, cancel, never mind, wait, wrong).\n"
    "- parallel: an independent quick question unrelated to the task (the time, the weather, a fact).\n"
    "- queue: extra instructions or information for the current task (language, format, scope).\n"
    "Call route with the strategy."
)
_ROUTE_TOOL = ToolSpec(
    "route",
    "Report the strategy for the message.",
    {
        "type": "object",
        "properties": {"strategy": {"type": "string", "enum": ["interrupt", "parallel", "queue"]}},
        "required": ["strategy"],
    },
)


@dataclass
class Classifier:
    """The event router on a small model (ch6 §3.2: "a lightweight classifier LLM as event router")."""

    model: Model
    timeout_s: float = 20.0
    calls: int = field(default=0, init=False)

    async def classify(self, event: Event) -> Decision | None:
        """The model's strategy for a user message, or None (then the rules' default holds)."""
        request = ModelRequest(
            _CLASSIFY_SYSTEM, "", (_ROUTE_TOOL,), (Message.user(event.content[:2000]),), max_tokens=40
        )
        self.calls += 1
        choices: list[Strategy] = [s for s in STRATEGIES if s != "drop"]
        value, text = await ask_choice(self.model, request, "strategy", choices, self.timeout_s, "urgency classifier")
        if value is None:  # a backend without a grammar may answer in words
            found = [s for s in choices if s in text.lower()]
            value = found[0] if len(found) == 1 else None
        return next((Decision(s, "classifier") for s in choices if s == value), None)


async def ask_choice(
    model: Model, request: ModelRequest, key: str, choices: Sequence[str], timeout_s: float, what: str
) -> tuple[str | None, str]:
    """The ``key`` argument of the reply's first call that is one of ``choices`` (None if none is), and its text.

    A failure or a timeout gives ``(None, "")`` and a warning: a classifier must never lose or block an event.
    """
    response, why = await try_complete(model, request, timeout_s)
    if response is None:
        log.warning("%s failed (%s); going on without it", what, why)
        return None, ""
    for call in response.message.tool_calls:
        try:
            value = call.parsed_arguments().get(key)
        except ValueError:
            continue
        if value in choices:
            return str(value), response.message.content
    return None, response.message.content


__all__ = ["Classifier", "Decision", "Router", "RuleRouter", "UrgencyRule", "ask_choice"]
