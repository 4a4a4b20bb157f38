"""The agent status bar (book ch2 §3.10, Exp 2-8/2-9).

State the harness computes, at the end of the context, so the model reads counts and limits
instead of recounting raw records.

The status is a ``role: user`` message ``<agent_status>…</agent_status>`` built by code from
counters, names and states only: never by the model, never from tool output text (so text from
``external`` tools cannot reach it), never in the system prompt. Techniques, each a switch in
:class:`StatusBarConfig`:

(a) ``timestamps``: ``[YYYY-MM-DD HH:MM:SS]`` prefixes on user messages and tool results
    (optionally from a simulated clock: ``clock_start`` + ``clock_step_s`` per event);
(b) ``counters``: per-tool call counts, ``Tool call #k for 'name'.`` on each result, and declared
    ``limits`` shown as constraint checks ("Maximum calls to Xfinity reached (3/3)") and enforced
    (a call over its limit is refused with an error result and never runs);
(c) ``todo``: the TODO tools, a plugin of their own (:class:`kairos.plugins.todo.TodoTools`) whose
    status lines this bar shows;
(d) ``detailed_errors``: four-layer error reports (:mod:`kairos.context.errors`);
(e) ``system_state``: time, cwd (follows the bash tool's ``cd``), OS, shell and Python version.

Other plugins' status lines (the TODO list, a tripped compression breaker) follow its own.
Counters are recomputed by replaying the trajectory (incrementally), so they are right after a
session resume; no count lives only in process memory.

Update modes (``mode``): ``replace`` rebuilds the trailing status for every request (it stays
out of the stable prefix); ``append`` adds the status to the trajectory as a persistent reminder
at the safe point before a request whenever it changed (ignoring the clock line), so every
byte stays cacheable; ``auto`` picks one per session with the book's rule, see
:func:`choose_update_mode`.
"""

from __future__ import annotations

import json
import os
import platform
import re
from collections.abc import Sequence
from dataclasses import asdict, replace
from datetime import datetime, timedelta
from pathlib import Path

from kairos.agent.plugin import Plugin, RunContext, SafePoint, StatusProvider
from kairos.context.builder import cwd_of, display_path, newest_event, session_task, status_message
from kairos.context.errors import FourLayerErrors
from kairos.context.session import SessionView
from kairos.models.base import estimate_message_tokens, estimate_tokens
from kairos.models.types import Message, ToolCall
from kairos.plugins.status_bar.config import (
    TIME_FORMAT,
    Clock,
    ModeDecision,
    SimulatedClock,
    StatusBarConfig,
    ToolLimit,
    UpdateMode,
    choose_update_mode,
)
from kairos.plugins.status_bar.tally import CallTally, CallVerdict, clean, constraint_lines, ordinal_note
from kairos.tools.base import Resource, Tool, ToolResult, ToolSet
from kairos.tools.builtins.clock import CLOCK_RESOURCE
from kairos.tools.executor import ErrorFormatter

UNANNOTATED = "kairos.unannotated"
"""``ToolResult.metadata`` key holding a result's text before the status bar annotated it."""
_MODE_KEY = "status_bar.mode"
_TALLY_KEY: Resource[tuple[object, CallTally]] = Resource("kairos.status_bar.tally")
_STAMP = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\] ")
_OPEN = "<agent_status>\n"


def environment_facts() -> dict[str, str]:
    """OS, shell and Python version: fixed for a process."""
    return {
        "OS": platform.system(),
        "shell": Path(os.environ.get("SHELL", "/bin/sh")).name,
        "Python": platform.python_version(),
    }


class StatusBar(Plugin):
    """The techniques and the update mode; provides the agent's status (replacing ``BasicStatus``).

    Args:
        config: which techniques are on; default :class:`StatusBarConfig`'s defaults.
        clock: the time source, shared with the tools; default a simulated clock when
            ``config.clock_start`` is set, else the local time.
        environment: the facts shown as system state; default OS, shell and Python version.
    """

    stage = "annotate"

    def __init__(
        self,
        config: StatusBarConfig | None = None,
        *,
        clock: Clock | None = None,
        environment: dict[str, str] | None = None,
    ) -> None:
        self.config = config or StatusBarConfig()
        c = self.config
        if clock is None and c.clock_start is not None:
            clock = SimulatedClock(c.clock_start, timedelta(seconds=c.clock_step_s))
        self._shared_clock = clock is not None
        self.clock: Clock = clock or (lambda: datetime.now().astimezone())
        self.environment = environment or environment_facts()

    # -- contributions -----------------------------------------------------------------------

    def status_provider(self) -> StatusProvider | None:
        """This bar, when enabled."""
        return self if self.config.enabled else None

    def error_formatter(self) -> ErrorFormatter | None:
        """Four-layer error reports, when enabled."""
        return FourLayerErrors() if self.config.enabled and self.config.detailed_errors else None

    async def open(self, ctx: RunContext) -> None:
        """Share a configured (simulated) clock with the tools, so TODO and current_time read the same time."""
        if self.config.enabled and self._shared_clock:
            ctx.session.tool_context.get_or_put(CLOCK_RESOURCE, lambda: self.clock)

    # -- the status ------------------------------------------------------------------------

    def render(self, ctx: RunContext, lines: Sequence[str] = ()) -> str | None:
        """The trailing status (replace mode); None when the status lives in the trajectory."""
        if self.mode_for(ctx.session, ctx.max_iterations) != "replace":
            return None
        return self.compose(ctx.session, ctx.tools, lines)

    def compose(
        self, session: SessionView, tools: ToolSet, extra: Sequence[str] = (), now: datetime | None = None
    ) -> str | None:
        """The status text for ``session`` right now; None when no technique has anything to say."""
        c = self.config
        lines: list[str] = []
        if c.system_state:
            now = now or self.clock()
            zone = f" {now.tzname()}" if now.tzinfo is not None and now.tzname() else ""
            lines.append(f"Time: {now:{TIME_FORMAT}}{zone}")
            env = " | ".join(f"{k} {v}" for k, v in self.environment.items())
            where, name = display_path(cwd_of(session), session.workspace), session.workspace.name
            # "workspace repo, cwd ." made the bundled model run `cd repo` from inside repo, again and again
            inside = f"you are already in the root of workspace {name}" if where == "." else f"in workspace {name}"
            lines.append(f"Environment: cwd {where} ({inside}) | {env}")
        if c.current_request:
            task = session_task(session)
            if task:
                lines.append(f"Current request: {clean(_STAMP.sub('', task), 240)}")
            if (arrived := newest_event(session.message_list())) is not None:
                lines.append(f"Newest input: {arrived} (arrived after the request; respond to it)")
        if c.counters:
            lines += self._counter_lines(self.tally(session, tools))
        lines += extra
        return "Current State:\n" + "\n".join(f"- {ln}" if ln[0] != " " else ln for ln in lines) if lines else None

    def _counter_lines(self, tally: CallTally) -> list[str]:
        lines: list[str] = []
        if tally.per_tool:
            parts = []
            for name, n in sorted(tally.per_tool.items()):
                keys = [(k, v) for (t, k), v in sorted(tally.per_key.items()) if t == name]
                detail = ", ".join(f"{tally.labels[(name, k)]}: {v} time{'s' * (v != 1)}" for k, v in keys)
                parts.append(f"'{name}' has been invoked {n} time{'s' * (n != 1)}" + (f" ({detail})" if detail else ""))
            lines.append("Tool call summary: " + "; ".join(parts))
        if tally.refused:
            refused = ", ".join(f"'{n}' {k}" for n, k in sorted(tally.refused.items()))
            lines.append(f"Refused calls (over a limit, not executed): {refused}")
        name, run = tally.streak
        if name and run >= self.config.repeat_alert_at:
            lines.append(f"Alert: '{name}' has been called {run} times in a row")
        checks = [constraint_lines(tally, name, limit) for name, limit in sorted(self.config.limits.items())]
        return lines + [ln for room, _ in checks for ln in room] + [ln for _, reached in checks for ln in reached]

    # -- counters --------------------------------------------------------------------------

    def tally(self, session: SessionView, tools: ToolSet) -> CallTally:
        """The session's call counters, brought up to date with its trajectory."""
        owner, tally = session.state.get(_TALLY_KEY) or (None, None)
        if owner is not self or tally is None:
            tally = CallTally()
            session.state.put(_TALLY_KEY, (self, tally))
        tally.update(session.message_list(), tools, self.config.limits)
        return tally

    def _verdict(self, ctx: RunContext, call: ToolCall) -> CallVerdict | None:
        return self.tally(ctx.session, ctx.tools).verdicts.get(call.id)

    async def before_tool(self, ctx: RunContext, call: ToolCall, tool: Tool) -> ToolResult | None:
        """Refuse a call over its declared limit (it never runs)."""
        if not (self.config.enabled and self.config.counters):
            return None
        v = self._verdict(ctx, call)
        if v is None or not v.refused:
            return None
        limit = self.config.limits[tool.name]
        scope = f"for {limit.per_argument} '{v.label}'" if v.key is not None else "in this session"
        return ToolResult(
            f"Refused by the harness: '{tool.name}' may be called at most {limit.max_calls} times {scope}, and "
            f"{v.key_number} calls were already made ({v.key_number}/{limit.max_calls}). The call was not made. "
            f"Do not call it again {scope}; "
            "tell the user the limit is reached, or continue another way.",
            is_error=True,
            metadata={"refused": "limit"},
        )

    async def after_tool(self, ctx: RunContext, call: ToolCall, tool: Tool | None, result: ToolResult) -> ToolResult:
        """``Tool call #k`` notes and timestamps on every result."""
        c = self.config
        if not (c.enabled and (c.counters or c.timestamps)):
            return result
        content = result.content
        if c.counters and tool is not None:
            v = self._verdict(ctx, call)
            if v is not None and not v.refused:
                content += "\n" + ordinal_note(v, c.limits.get(tool.name))
        if c.timestamps:
            content = f"[{self.clock():{TIME_FORMAT}}] {content}"
        metadata = {**result.metadata, UNANNOTATED: result.metadata.get(UNANNOTATED, result.content)}
        return result.with_content(content, metadata)

    # -- inputs and the append mode --------------------------------------------------------

    def on_input(self, ctx: RunContext, message: Message) -> Message:
        """A timestamp on every message that arrives through the inbox."""
        if not (self.config.enabled and self.config.timestamps):
            return message
        return replace(message, content=f"[{self.clock():{TIME_FORMAT}}] {message.content}")

    async def at_safe_point(self, ctx: RunContext, at: SafePoint) -> Sequence[Message]:
        """Append mode: a reminder whenever the status changed (the clock line alone does not count)."""
        if not self.config.enabled or at != "before_request":
            return ()
        if self.mode_for(ctx.session, ctx.max_iterations) != "append":
            return ()
        text = self.compose(ctx.session, ctx.tools, ctx.status_lines())
        if text is not None and _fingerprint(text) != _fingerprint(last_status(ctx.session.message_list()) or ""):
            return (status_message(text),)
        return ()

    def mode_for(self, session: SessionView, max_iterations: int = 20) -> UpdateMode:
        """The session's update mode; in ``auto`` decided once per session and frozen."""
        if self.config.mode != "auto":
            return self.config.mode
        return self.decision(session, max_iterations).mode

    def decision(self, session: SessionView, max_iterations: int = 20) -> ModeDecision:
        """The ``auto`` decision for ``session``, made on first use and frozen in the session store."""
        frozen = session.frozen(_MODE_KEY)
        if frozen is None:
            text = self.compose(session, ToolSet(), now=datetime(2000, 1, 1)) or ""
            history = [m for m in session.message_list() if m.origin is None]
            if session.request_count and history:
                between = sum(map(estimate_message_tokens, history)) / session.request_count
            else:
                between = float(self.config.tokens_between_updates)
            made = choose_update_mode(
                estimate_tokens(status_message(text).content) if text else 0,
                round(between, 1),
                self.config.expected_updates or max_iterations,
                self.config.cached_price_ratio,
            )
            frozen = session.freeze(_MODE_KEY, json.dumps(asdict(made), sort_keys=True))
        return ModeDecision(**json.loads(frozen))


def last_status(messages: Sequence[Message]) -> str | None:
    """The newest status appended to the trajectory (append mode), if any."""
    for m in reversed(messages):
        if m.origin is not None and m.content.startswith(_OPEN):
            return m.content
    return None


def _fingerprint(text: str) -> str:
    """The status minus its clock line: a new time alone is no reason to append a reminder."""
    body = text.removeprefix(_OPEN).removesuffix("\n</agent_status>")
    return "\n".join(ln for ln in body.splitlines() if not ln.startswith("- Time: "))


__all__ = [
    "UNANNOTATED",
    "CallTally",
    "CallVerdict",
    "ModeDecision",
    "SimulatedClock",
    "StatusBar",
    "StatusBarConfig",
    "ToolLimit",
    "choose_update_mode",
    "environment_facts",
    "last_status",
]
