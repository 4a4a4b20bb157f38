"""Loop guard: the same call with the same result, again and again, is a loop.

Keyed on (tool, canonical arguments, result hash), as users keep asking of other harnesses
(openai-agents #191, nanobot #2298): a changing result is progress, an identical one is not.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter

from kairos.models.types import ToolCall

WARN_AT = 3
STOP_AT = 4


def canonical_arguments(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, separators=(",", ":"))
    except (json.JSONDecodeError, TypeError):
        return arguments.strip()


class LoopGuard:
    """Counts identical (call, result) pairs within one run."""

    def __init__(self, warn_at: int = WARN_AT, stop_at: int = STOP_AT) -> None:
        self.warn_at = warn_at
        self.stop_at = stop_at
        self._seen: Counter[tuple[str, str, str]] = Counter()

    def observe(self, call: ToolCall, result_content: str) -> int:
        key = (call.name, canonical_arguments(call.arguments), hashlib.sha256(result_content.encode()).hexdigest())
        self._seen[key] += 1
        return self._seen[key]

    def warning(self, call: ToolCall, count: int) -> str:
        return (
            f"\n[kairos loop guard] This is call #{count} of '{call.name}' with the same arguments and the same "
            "result. Repeating it will not give new information: use what you have, try a different approach, "
            "or answer."
        )

    def stop_message(self, call: ToolCall, count: int) -> str:
        return (
            f"Stopped: '{call.name}' was called {count} times with the same arguments and returned the same result "
            "each time, so the agent was looping. The results so far are in the session; rephrase the task or "
            "give more information to continue."
        )
