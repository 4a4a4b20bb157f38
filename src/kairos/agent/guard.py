"""Loop guard: the same call with the same result, again and again, is a loop.

Keyed on (tool, canonical arguments, result hash), as users keep asking of other harnesses
(openai-agents #191, nanobot #2298): a changing result is progress, an identical one is not.
Steps: at the second identical pair the next reply may not call that tool (masked by the local
model's grammar, the prompt unchanged); at the third the result carries a warning and the mask holds
until a call with side effects runs (the world may have changed); at the fourth the run stops. The
same call made three times in a row is masked for one reply even when its result changes (a model
asking the clock over and over until ``max_iterations``).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter

from kairos.models.types import ToolCall

MASK_AT = 2
"""From this many identical (call, result) pairs on, the next reply may not call that tool (text or another tool)."""
WARN_AT = 3
"""From this many identical (call, result) pairs on, the result carries a warning to the model."""
STOP_AT = 4
"""At this many the run stops with the loop guard's message instead of asking the model again."""


def canonical_arguments(arguments: str) -> str:
    """``arguments`` as compact JSON with sorted keys, so spacing and key order do not matter.

    Arguments that are not JSON are compared as given, stripped.
    """
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, separators=(",", ":"))
    except (json.JSONDecodeError, TypeError):
        return arguments.strip()


class LoopGuard:
    """Counts identical (call, result) pairs within one run.

    Compare the tool's raw result: an annotation added afterwards (a timestamp, a call number)
    would make identical results look different and the guard would never fire.

    Args:
        warn_at: the count from which :meth:`warning` is appended to the result.
        stop_at: the count at which the run stops with :meth:`stop_message`.
    """

    def __init__(self, warn_at: int = WARN_AT, stop_at: int = STOP_AT, mask_at: int = MASK_AT) -> None:
        self.warn_at = warn_at
        self.stop_at = stop_at
        self.mask_at = mask_at
        self._seen: Counter[tuple[str, str, str]] = Counter()
        self._once: dict[str, None] = {}
        self._held: dict[str, None] = {}
        self._last: tuple[str, str] | None = None
        self._in_a_row = 0

    def observe(self, call: ToolCall, result_content: str, *, side_effects: bool = False) -> int:
        """Record one call and its result; returns how often this exact pair has been seen.

        ``side_effects``: the call may have changed the world, so the held masks are lifted.
        """
        same = (call.name, canonical_arguments(call.arguments))
        key = (*same, hashlib.sha256(result_content.encode()).hexdigest())
        self._seen[key] += 1
        count = self._seen[key]
        self._in_a_row = self._in_a_row + 1 if same == self._last else 1
        self._last = same
        if side_effects:
            self._held.clear()
        if count >= self.warn_at:
            self._held[call.name] = None
        elif count >= self.mask_at or self._in_a_row > self.mask_at:
            self._once[call.name] = None  # also a call repeated in a row whose result only ticks (a clock)
        return count

    def take_masked(self) -> tuple[str, ...]:
        """The tools the next reply may not call: repeated since the last request, or held.

        A small model that re-issues a call it already has the result of (greedy decoding makes that
        a fixed point) usually takes the next step once its grammar rules the repeat out.
        """
        names = tuple({**self._held, **self._once})
        self._once = {}
        return names

    def warning(self, call: ToolCall, count: int) -> str:
        """The note appended to the repeated result, telling the model it is looping."""
        return (
            f"\n[kairos loop guard] This is call #{count} of '{call.name}' with the same arguments and the same "
            "result. Repeating it will not give new information: use what you have, try a different approach, "
            "or answer."
        )

    def stop_message(self, call: ToolCall, count: int) -> str:
        """The final answer when the run is stopped for looping."""
        return (
            f"Stopped: '{call.name}' was called {count} times with the same arguments and returned the same result "
            "each time, so the agent was looping. The results so far are in the session; rephrase the task or "
            "give more information to continue."
        )
