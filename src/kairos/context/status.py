"""The agent status bar (book ch2 §3.10, Exp 2-8/2-9): state the harness computes, at the end of
the context, so the model reads counts and limits instead of recounting raw records.

The status is a ``role: user`` message ``<agent_status>…</agent_status>`` built by code from
counters, names and states only: never by the model, never from tool output text (so text from
``external`` tools cannot reach it), never in the system prompt. Five techniques, each a switch
in :class:`StatusBarConfig`:

(a) ``timestamps``: ``[YYYY-MM-DD HH:MM:SS]`` prefixes on user messages and tool results
    (optionally from a simulated clock: ``clock_start`` + ``clock_step_s`` per event);
(b) ``counters``: per-tool call counts, ``Tool call #k for 'name'.`` on each result, and declared
    ``limits`` shown as constraint checks ("Maximum calls to Xfinity reached (3/3)") and enforced
    (a call over its limit is refused with an error result and never runs);
(c) ``todo``: the ``rewrite_todo_list``/``update_todo_status`` tools, the list shown in the status;
(d) ``detailed_errors``: four-layer error reports (:mod:`kairos.context.errors`);
(e) ``system_state``: time, cwd (follows the bash tool's ``cd``), OS, shell and Python version.

Counters are recomputed by replaying the trajectory (incrementally), so they are right after a
session resume; no count lives only in process memory.

Update modes (``mode``): ``replace`` rebuilds the trailing status for every request (the builder
keeps it out of the stable prefix); ``append`` adds the status to the trajectory as a persistent
reminder before a request whenever it changed (ignoring the clock line), so every byte stays
cacheable; ``auto`` picks one per session with the book's rule, see :func:`choose_update_mode`.
"""

from __future__ import annotations

import json
import os
import platform
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias
from weakref import WeakValueDictionary

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kairos.context.builder import current_task, status_message
from kairos.context.errors import FourLayerErrors
from kairos.models.base import estimate_message_tokens, estimate_tokens
from kairos.models.types import Message, ToolCall
from kairos.tools.base import Tool, ToolContext, ToolRegistry, ToolResult
from kairos.tools.builtins.clock import CLOCK_RESOURCE
from kairos.tools.builtins.todo import TodoTools, todo_list, todo_tools

if TYPE_CHECKING:
    from kairos.agent.loop import Agent
    from kairos.context.session import Session

UpdateMode: TypeAlias = Literal["replace", "append"]
Clock = Callable[[], datetime]
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
UNANNOTATED = "kairos.unannotated"
"""``ToolResult.metadata`` key holding a result's text before the status bar annotated it."""
_MODE_KEY = "status_bar.mode"
_TALLY_KEY = "kairos.status_bar.tally"
_STAMP = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\] ")
_OPEN = "<agent_status>\n"


class ToolLimit(BaseModel):
    """At most ``max_calls`` calls of a tool per session, or per value of one argument."""

    model_config = ConfigDict(extra="forbid")

    max_calls: int = Field(ge=0)
    per_argument: str | None = Field(None, description="count per value of this argument, e.g. 'merchant'")


class StatusBarConfig(BaseModel):
    """``[status_bar]`` in kairos.toml. Every technique can be switched off on its own."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    mode: Literal["replace", "append", "auto"] = "replace"
    current_request: bool = Field(True, description="recite the user's latest request (their own words)")
    timestamps: bool = Field(True, description="(a) [YYYY-MM-DD HH:MM:SS] on user messages and tool results")
    clock_start: datetime | None = Field(None, description="simulated clock start; None = real time")
    clock_step_s: float = Field(1.0, ge=0, description="simulated seconds per clock reading (event)")
    counters: bool = Field(True, description="(b) call counters, 'Tool call #k' notes, limits (shown + enforced)")
    limits: dict[str, ToolLimit] = Field(default_factory=dict, description="e.g. {phone_call = 3} or a table")
    repeat_alert_at: int = Field(3, ge=2, description="alert when one tool is called this many times in a row")
    todo: bool = Field(
        False, description="(c) TODO tools, list shown in the status; off by default: ~430 tokens of tool schemas"
    )
    detailed_errors: bool = Field(True, description="(d) four-layer error reports for tool exceptions")
    system_state: bool = Field(True, description="(e) time, cwd, OS, shell, Python version")
    cached_price_ratio: float = Field(0.1, ge=0, le=1, description="auto mode: α, cached/normal input price")
    expected_updates: int | None = Field(None, ge=1, description="auto mode: N; default the agent's max_iterations")
    tokens_between_updates: int = Field(300, ge=1, description="auto mode: R when the session has no history yet")

    @field_validator("limits", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        """``{"phone_call": 3}`` means ``{"phone_call": {"max_calls": 3}}``."""
        if isinstance(value, dict):
            return {k: {"max_calls": v} if isinstance(v, int) else v for k, v in value.items()}
        return value


@dataclass
class SimulatedClock:
    """A deterministic clock: returns ``start``, then ``start + step``, ... (one step per reading).

    Readings are per event (a stamped message, a status render). A resumed process restarts at
    ``start``; use it for experiments and tests, not for real sessions.
    """

    start: datetime
    step: timedelta = timedelta(seconds=1)
    _next: datetime | None = None

    def __call__(self) -> datetime:
        now = self._next or self.start
        self._next = now + self.step
        return now


@dataclass(frozen=True, slots=True)
class ModeDecision:
    """The replace/append choice and the numbers behind it (book ch2 L846-856).

    ``status_tokens`` (S): the rendered status at decision time, estimated at 4 chars/token.
    ``tokens_between_updates`` (R): trajectory tokens per request so far when the session has
    history, else the configured estimate. ``expected_updates`` (N): configured, default the
    agent's ``max_iterations`` (one update per request). ``cached_price_ratio`` (α): configured,
    default 0.1 (cache reads cost about a tenth of input at Anthropic, DeepSeek, OpenAI).
    """

    mode: UpdateMode
    status_tokens: int
    tokens_between_updates: float
    expected_updates: int
    cached_price_ratio: float

    @property
    def cost_replace(self) -> float:
        """``(N−1)(1−α)R``: uncached re-reads of what follows the replaced status."""
        return (self.expected_updates - 1) * (1 - self.cached_price_ratio) * self.tokens_between_updates

    @property
    def cost_append(self) -> float:
        """``α·S·N(N−1)/2``: cached re-reads of the statuses piling up."""
        n = self.expected_updates
        return self.cached_price_ratio * self.status_tokens * n * (n - 1) / 2


def choose_update_mode(status_tokens: int, tokens_between: float, updates: int, alpha: float) -> ModeDecision:
    """Append iff ``α·S·N/2 < (1−α)·R``, else replace. Ignores context occupancy and the risk of
    the model trusting a stale status, so check provider pricing and measured hit rates too."""
    append = alpha * status_tokens * updates / 2 < (1 - alpha) * tokens_between
    return ModeDecision("append" if append else "replace", status_tokens, tokens_between, updates, alpha)


@dataclass(frozen=True, slots=True)
class CallVerdict:
    """What the counters decided about one tool call."""

    tool: str
    number: int
    """This call is the tool's ``number``-th counted call (0 when refused)."""
    key: str | None = None
    """Normalised value of the limited argument (per-argument limits only)."""
    label: str | None = None
    """That value as the model wrote it (cleaned), for messages."""
    key_number: int = 0
    """Calls counted for ``key`` including this one; for a refused call, the calls already made."""
    refused: bool = False


@dataclass
class CallTally:
    """Counters replayed from the trajectory; ``seen`` messages are already counted."""

    seen: int = 0
    per_tool: Counter[str] = field(default_factory=Counter)
    per_key: Counter[tuple[str, str]] = field(default_factory=Counter)
    labels: dict[tuple[str, str], str] = field(default_factory=dict)
    refused: Counter[str] = field(default_factory=Counter)
    verdicts: dict[str, CallVerdict] = field(default_factory=dict)
    streak: tuple[str, int] = ("", 0)

    def update(self, messages: Sequence[Message], tools: ToolRegistry, limits: dict[str, ToolLimit]) -> None:
        """Count the calls of messages not seen yet, exactly as the executor hooks judged them:
        only calls that reached the hooks (known tool, valid arguments) count, in reply order."""
        for m in messages[self.seen :]:
            for c in m.tool_calls if m.role == "assistant" else ():
                args = _valid_args(c, tools)
                if args is not None:
                    self._count(c, args, limits.get(c.name))
        self.seen = len(messages)

    def _count(self, c: ToolCall, args: dict[str, Any], limit: ToolLimit | None) -> None:
        key = label = None
        if limit is not None and limit.per_argument:
            label = _clean(str(args.get(limit.per_argument, "(none)")), 40)
            key = label.casefold()
        used = self.per_key[(c.name, key)] if key is not None else self.per_tool[c.name]
        if limit is not None and used >= limit.max_calls:
            self.refused[c.name] += 1
            self.verdicts[c.id] = CallVerdict(c.name, 0, key, label, used, refused=True)
            return
        self.per_tool[c.name] += 1
        if key is not None and label is not None:
            self.per_key[(c.name, key)] += 1
            self.labels.setdefault((c.name, key), label)
        name, run = self.streak
        self.streak = (c.name, run + 1 if name == c.name else 1)
        self.verdicts[c.id] = CallVerdict(c.name, self.per_tool[c.name], key, label, used + 1)


def _valid_args(c: ToolCall, tools: ToolRegistry) -> dict[str, Any] | None:
    t = tools.get(c.name)
    if t is None:
        return None
    try:
        args = json.loads(c.arguments) if c.arguments.strip() else {}
        if not isinstance(args, dict):
            return None
        t.validate(args)
    except (ValueError, ValidationError):
        return None
    return args


def _clean(text: str, limit: int) -> str:
    """One line, no tags, at most ``limit`` characters: model- or user-written names stay inert."""
    text = " ".join(text.split()).replace("<", "‹").replace(">", "›")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _ordinal_note(v: CallVerdict, limit: ToolLimit | None) -> str:
    note = f"Tool call #{v.number} for '{v.tool}'."
    if limit is None:
        return note
    target = f"{limit.per_argument} '{v.label}'" if v.key is not None else "this tool"
    used = v.key_number
    note += f" This is call {used} of at most {limit.max_calls} for {target}"
    return note + (": the limit is now reached, do not call it again." if used >= limit.max_calls else ".")


def environment_facts() -> dict[str, str]:
    return {
        "OS": platform.system(),
        "shell": Path(os.environ.get("SHELL", "/bin/sh")).name,
        "Python": platform.python_version(),
    }


class _NoTrailingStatus:
    """Builder status provider for append mode: the status lives in the trajectory instead."""

    def render(self, session: Session) -> str | None:
        return None


class StatusBar:
    """Extension: the five techniques and the update mode; replaces the builder's BasicStatus."""

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
        self._tools = ToolRegistry()
        self._extensions: Sequence[object] = ()
        """The agent's extensions: those with ``status_line(session)`` add a line (e.g. a tripped breaker)."""
        self._updates = c.expected_updates or 20
        self._sessions: WeakValueDictionary[str, Session] = WeakValueDictionary()

    def tools(self) -> Sequence[Tool]:
        return todo_tools() if self.config.enabled and self.config.todo else []

    def install(self, agent: Agent) -> None:
        c = self.config
        if not c.enabled:
            return
        self._tools = agent.tools
        self._extensions = agent.extensions
        self._updates = c.expected_updates or agent.max_iterations
        agent.builder.status = self if c.mode != "append" else _NoTrailingStatus()
        agent.before_request.append(self._before_request)
        agent.user_message_hooks.append(self._on_user_message)
        if c.counters:
            agent.executor.before.append(self._enforce)
        if c.counters or c.timestamps:
            agent.executor.after.append(self._annotate)
        if c.detailed_errors:
            agent.executor.format_error = FourLayerErrors()
        if c.todo:
            TodoTools().install(agent)

    # -- builder side ----------------------------------------------------------------------

    def render(self, session: Session) -> str | None:
        """The trailing status (replace mode); None when the status lives in the trajectory."""
        self._bind(session)
        return self.compose(session) if self.mode_for(session) == "replace" else None

    def compose(self, session: Session, now: datetime | None = None) -> str | None:
        """The status text for ``session`` right now; None when no technique has anything to say."""
        c = self.config
        lines: list[str] = []
        if c.system_state:
            now = now or self.clock()
            zone = f" {now.tzname()}" if now.tzinfo is not None and now.tzname() else ""
            lines.append(f"Time: {now:{TIME_FORMAT}}{zone}")
            env = " | ".join(f"{k} {v}" for k, v in self.environment.items())
            lines.append(f"Environment: cwd {_display_cwd(session)} | {env}")
        if c.current_request:
            task = current_task(session.message_list())
            if task:
                lines.append(f"Current request: {_clean(_STAMP.sub('', task), 240)}")
        if c.counters:
            lines += self._counter_lines(self.tally(session))
        if c.todo:
            todos = todo_list(session)
            if todos.items:
                lines.append(f"TODO ({todos.summary()}):")
                lines += [f"  [{i.id}] {i.status}: {_clean(i.content, 160)}" for i in todos.items]
        lines += self._extension_lines(session)
        return "Current State:\n" + "\n".join(f"- {ln}" if ln[0] != " " else ln for ln in lines) if lines else None

    def _extension_lines(self, session: Session) -> list[str]:
        found = (getattr(ext, "status_line", None) for ext in self._extensions if ext is not self)
        return [line for fn in found if callable(fn) and (line := fn(session))]

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
        checks = [_constraint_lines(tally, name, limit) for name, limit in sorted(self.config.limits.items())]
        return lines + [ln for room, _ in checks for ln in room] + [ln for _, reached in checks for ln in reached]

    # -- counters --------------------------------------------------------------------------

    def tally(self, session: Session) -> CallTally:
        """The session's call counters, brought up to date with its trajectory."""
        owner, tally = session.state.get(_TALLY_KEY, (None, None))
        if owner is not self or not isinstance(tally, CallTally):
            tally = CallTally()
            session.state[_TALLY_KEY] = (self, tally)
        tally.update(session.message_list(), self._tools, self.config.limits)
        return tally

    def _verdict(self, call: ToolCall, ctx: ToolContext) -> CallVerdict | None:
        session = self._sessions.get(ctx.session_id)
        return self.tally(session).verdicts.get(call.id) if session is not None else None

    async def _enforce(self, call: ToolCall, t: Tool, ctx: ToolContext) -> ToolResult | None:
        v = self._verdict(call, ctx)
        if v is None or not v.refused:
            return None
        limit = self.config.limits[t.name]
        scope = f"for {limit.per_argument} '{v.label}'" if v.key is not None else "in this session"
        return ToolResult(
            f"Refused by the harness: '{t.name}' may be called at most {limit.max_calls} times {scope}, and "
            f"{v.key_number} calls were already made ({v.key_number}/{limit.max_calls}). The call was not made. "
            f"Do not call it again {scope}; "
            "tell the user the limit is reached, or continue another way.",
            is_error=True,
            metadata={"refused": "limit"},
        )

    def _annotate(self, call: ToolCall, t: Tool | None, result: ToolResult, ctx: ToolContext) -> ToolResult:
        content = result.content
        if self.config.counters and t is not None:
            v = self._verdict(call, ctx)
            if v is not None and not v.refused:
                content += "\n" + _ordinal_note(v, self.config.limits.get(t.name))
        if self.config.timestamps:
            content = f"[{self.clock():{TIME_FORMAT}}] {content}"
        metadata = {**result.metadata, UNANNOTATED: result.metadata.get(UNANNOTATED, result.content)}
        return ToolResult(content, result.is_error, metadata)

    # -- agent hooks -----------------------------------------------------------------------

    def _bind(self, session: Session) -> None:
        """Remember the session so executor hooks (which see only its ToolContext) can find it."""
        self._sessions[session.id] = session
        if self._shared_clock:  # the TODO and current_time tools then read the same (simulated) time
            session.tool_context.resources.setdefault(CLOCK_RESOURCE, self.clock)

    def _on_user_message(self, session: Session, message: Message) -> Message:
        self._bind(session)
        if not self.config.timestamps:
            return message
        return replace(message, content=f"[{self.clock():{TIME_FORMAT}}] {message.content}")

    async def _before_request(self, session: Session) -> None:
        self._bind(session)
        if self.mode_for(session) != "append":
            return
        text = self.compose(session)
        if text is not None and _fingerprint(text) != _fingerprint(last_status(session.message_list()) or ""):
            session.append(status_message(text))

    # -- update mode -----------------------------------------------------------------------

    def mode_for(self, session: Session) -> UpdateMode:
        """The session's update mode; in ``auto`` decided once per session and frozen."""
        if self.config.mode != "auto":
            return self.config.mode
        decision = self.decision(session)
        return decision.mode

    def decision(self, session: Session) -> ModeDecision:
        """The ``auto`` decision for ``session``, made on first use and frozen in the session store."""
        frozen = session.store.frozen(session.id, _MODE_KEY)
        if frozen is None:
            text = self.compose(session, now=datetime(2000, 1, 1)) or ""
            history = [m for m in session.message_list() if m.origin is None]
            if session.request_count and history:
                between = sum(map(estimate_message_tokens, history)) / session.request_count
            else:
                between = float(self.config.tokens_between_updates)
            made = choose_update_mode(
                estimate_tokens(status_message(text).content) if text else 0,
                round(between, 1),
                self._updates,
                self.config.cached_price_ratio,
            )
            frozen = session.freeze(_MODE_KEY, json.dumps(asdict(made), sort_keys=True))
        return ModeDecision(**json.loads(frozen))


def _constraint_lines(tally: CallTally, name: str, limit: ToolLimit) -> tuple[list[str], list[str]]:
    """(lines for limits with room left, lines for limits reached): reached ones go last, nearest
    to the model's next decision, and say that further calls are refused (they are enforced)."""
    cap = limit.max_calls
    if limit.per_argument is None:
        n = tally.per_tool[name]
        if n >= cap:
            return [], [f"Constraint check: Maximum calls to '{name}' reached ({n}/{cap}); further calls are refused"]
        return [f"Constraint check: '{name}' {n}/{cap} calls used"], []
    used = [(k, v) for (t, k), v in sorted(tally.per_key.items()) if t == name]
    if not used:
        return [f"Constraint check: '{name}' at most {cap} calls per {limit.per_argument} (none used)"], []
    room, reached = [], []
    for k, v in used:
        label = tally.labels[(name, k)]
        if v >= cap:
            reached.append(
                f"Constraint check: Maximum calls to {label} reached ({v}/{cap}); "
                f"further '{name}' calls for {label} are refused"
            )
        else:
            room.append(f"Constraint check: '{name}' calls to {label}: {v}/{cap} used")
    return room, reached


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


def _display_cwd(session: Session) -> str:
    cwd = session.tool_context.cwd or session.workspace
    try:
        rel = cwd.relative_to(session.workspace)
    except ValueError:
        return str(cwd)
    return "." if str(rel) == "." else "./" + rel.as_posix()
