"""Call counters replayed from the trajectory, and the lines the status bar shows about them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kairos.models.types import ArgumentsError, Message, ToolCall
from kairos.plugins.status_bar.config import ToolLimit
from kairos.tools.base import InvalidArguments, ToolSet


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

    def update(self, messages: Sequence[Message], tools: ToolSet, limits: dict[str, ToolLimit]) -> None:
        """Count the calls of messages not seen yet, exactly as the executor hooks judged them.

        Only calls that reached the hooks (known tool, valid arguments) count, in reply order.
        """
        for m in messages[self.seen :]:
            for c in m.tool_calls if m.role == "assistant" else ():
                args = _valid_args(c, tools)
                if args is not None:
                    self._count(c, args, limits.get(c.name))
        self.seen = len(messages)

    def _count(self, c: ToolCall, args: dict[str, Any], limit: ToolLimit | None) -> None:
        key = label = None
        if limit is not None and limit.per_argument:
            label = clean(str(args.get(limit.per_argument, "(none)")), 40)
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


def _valid_args(c: ToolCall, tools: ToolSet) -> dict[str, Any] | None:
    t = tools.get(c.name)
    if t is None:
        return None
    try:
        args = c.parsed_arguments()
        t.validate(args)
    except (ArgumentsError, InvalidArguments):
        return None
    return args


def clean(text: str, limit: int) -> str:
    """One line, no tags, at most ``limit`` characters: model- or user-written names stay inert."""
    text = " ".join(text.split()).replace("<", "‹").replace(">", "›")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def ordinal_note(v: CallVerdict, limit: ToolLimit | None) -> str:
    """``Tool call #k for 'name'.``, plus how much of ``limit`` this call used, for its result."""
    note = f"Tool call #{v.number} for '{v.tool}'."
    if limit is None:
        return note
    target = f"{limit.per_argument} '{v.label}'" if v.key is not None else "this tool"
    used = v.key_number
    note += f" This is call {used} of at most {limit.max_calls} for {target}"
    return note + (": the limit is now reached, do not call it again." if used >= limit.max_calls else ".")


def constraint_lines(tally: CallTally, name: str, limit: ToolLimit) -> tuple[list[str], list[str]]:
    """Constraint-check lines for tool ``name``'s ``limit``.

    Returns:
        ``(lines for limits with room left, lines for limits reached)``: reached ones go last,
        nearest to the model's next decision, and say that further calls are refused (they are
        enforced).
    """
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
