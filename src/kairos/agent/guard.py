"""Loop guard: repeating what gave nothing new is a loop; changing results are progress.

One :class:`LoopGuard` per run (one turn). It keys every call on (tool, canonical arguments) and
every result on its text with the noise taken out (:func:`normalise_result`: bash's ``line N``,
timestamps, durations, pids, temp paths), as users keep asking of other harnesses
(openai-agents #191, nanobot #2298). Its rules:

- Repeats: at the second identical (call, result) pair the next reply may not call that tool (masked
  by the local model's grammar, the prompt unchanged); at the third the result carries a warning and
  the mask holds until a call with side effects runs (the world may have changed); at the fourth the
  run stops. The same call made three times in a row is masked for one reply even when its result
  changes (a model asking the clock over and over).
- Failures: a call that failed twice (an error result, or a command's non-zero exit) with nothing
  changed since is not run a third time; it is answered with a refusal, and the status says why, once.
  "Changed" means a call with side effects succeeded, or new input arrived.
- Read-only calls: an identical call of a ``read_only`` tool is answered from the turn's first result
  unless a call with side effects ran in between (or new input arrived), with a note saying so. Tools
  whose answer changes by itself (``volatile``: a task's progress) always run. ``current_time`` is
  reused too: within a turn the time of its first call stands, and the note says it was reused.
- No progress: after :data:`IDLE_STEPS` consecutive steps (one reply's calls and their results) that
  brought nothing new — every result repeated one this call already had in the turn, or the call was
  not run — the run stops with a message saying what went round and what to do.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter

from kairos.models.types import ToolCall
from kairos.tools.audit import NOT_RUN_KEY
from kairos.tools.base import Tool, ToolResult

MASK_AT = 2
"""From this many identical (call, result) pairs on, the next reply may not call that tool (text or another tool)."""
WARN_AT = 3
"""From this many identical (call, result) pairs on, the result carries a warning to the model."""
STOP_AT = 4
"""At this many the run stops with the loop guard's message instead of asking the model again."""
BLOCK_AFTER = 2
"""An identical call that failed this many times, nothing changed since, is not run again."""
IDLE_STEPS = 3
"""This many consecutive steps with nothing new stop the run."""

REUSED = "reused"
"""``metadata[NOT_RUN_KEY]`` of a read-only call answered from the turn's earlier identical call."""
REPEATED_FAILURE = "repeated_failure"
"""``metadata[NOT_RUN_KEY]`` of a call refused because it failed twice with nothing changed since."""
REUSED_NOTE = (
    "\n[kairos: the same call was made earlier in this turn and nothing with side effects ran since, so this is "
    "its result again (the tool was not run a second time)]"
)

_NOISE: tuple[tuple[re.Pattern[str], str], ...] = (
    # bash's own errors count the lines its shell has read so far: "bash: line 6: cd: repo: No such file"
    (re.compile(r"^((?:/usr)?(?:/bin/)?(?:ba)?sh): (-c: )?line \d+:", re.M), r"\1: \2line N:"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2}\b)?"), "<time>"),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b"), "<time>"),
    (re.compile(r"\b\d+m\d+(?:\.\d+)?s\b"), "<duration>"),  # time's "real 0m0.004s"
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|s|secs?|seconds?|mins?|minutes?)\b"), "<duration>"),
    (re.compile(r"\b(pid|PID|process|Process)([\s=:#]*)\d+\b"), r"\1\2<pid>"),
    (re.compile(r"^\[\d+\]\s+\d+$", re.M), "[job] <pid>"),  # bash's "[1] 12345" when a job starts
    (re.compile(r"(?:/private)?(?:/tmp|/var/tmp|/var/folders/[^\s/]+/[^\s/]+/T)/[^\s'\"`:,;)\]]*"), "<tmp>"),
    (re.compile(r"\.kairos/spill/[^\s'\"`:,;)\]]+"), ".kairos/spill/<file>"),
    (re.compile(r"\b0x[0-9a-fA-F]{6,}\b"), "0x<addr>"),  # "<object at 0x7f3a…>"
)


def canonical_arguments(arguments: str) -> str:
    """``arguments`` as compact JSON with sorted keys, so spacing and key order do not matter.

    Arguments that are not JSON are compared as given, stripped.
    """
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, separators=(",", ":"))
    except (json.JSONDecodeError, TypeError):
        return arguments.strip()


def normalise_result(text: str) -> str:
    """``text`` without what differs between two runs of the same command that did the same thing.

    bash's ``line N``, timestamps and times of day, durations, pids, temp and spill paths, memory
    addresses. Anything else (file contents, test output, a traceback's ``line 12``) is kept, so a
    changed result still counts as progress.
    """
    for pattern, replacement in _NOISE:
        text = pattern.sub(replacement, text)
    return text


def failed(result: ToolResult) -> bool:
    """An error result, or a command that exited non-zero (bash and python report ``exit_code``)."""
    return result.is_error or bool(result.metadata.get("exit_code")) or bool(result.metadata.get("shell_exit_code"))


def _shown(call: ToolCall, limit: int = 120) -> str:
    """``name {arguments}`` for a message, the arguments cut to ``limit`` characters on one line."""
    args = " ".join(canonical_arguments(call.arguments).split())
    return f"{call.name} {args[:limit]}{'…' if len(args) > limit else ''}"


def _first_line(text: str, limit: int = 160) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line[:limit] + ("…" if len(line) > limit else "")


class LoopGuard:
    """The rules of the module docstring for one run.

    Compare the tool's raw result: an annotation added afterwards (a timestamp, a call number)
    would make identical results look different and the guard would never fire.

    Args:
        warn_at: the count from which :meth:`warning` is appended to the result.
        stop_at: the count at which the run stops with :meth:`stop_message`.
        mask_at: the count from which the next reply may not call the tool.
        block_after: failures of an identical call, nothing changed since, after which it is not run.
        idle_steps: consecutive steps with nothing new after which the run stops.
    """

    def __init__(
        self,
        warn_at: int = WARN_AT,
        stop_at: int = STOP_AT,
        mask_at: int = MASK_AT,
        *,
        block_after: int = BLOCK_AFTER,
        idle_steps: int = IDLE_STEPS,
    ) -> None:
        self.warn_at = warn_at
        self.stop_at = stop_at
        self.mask_at = mask_at
        self.block_after = block_after
        self.idle_steps = idle_steps
        self._seen: Counter[tuple[str, str, str]] = Counter()
        self._once: dict[str, None] = {}
        self._held: dict[str, None] = {}
        self._last: tuple[str, str] | None = None
        self._in_a_row = 0
        self._failures: Counter[tuple[str, str]] = Counter()
        self._last_error: dict[tuple[str, str], str] = {}
        self._fresh: dict[tuple[str, str], ToolResult] = {}
        self._told: set[tuple[str, str]] = set()
        self._notes: list[str] = []
        self._step: list[tuple[ToolCall, bool]] = []
        self._idle: list[list[tuple[ToolCall, bool]]] = []

    # -- before a call runs ----------------------------------------------------------------

    def refusal(self, call: ToolCall) -> ToolResult | None:
        """The answer to ``call`` when it failed :attr:`block_after` times, nothing changed since; else None.

        The next request's status explains it, once per call.
        """
        key = (call.name, canonical_arguments(call.arguments))
        n = self._failures[key]
        if n < self.block_after:
            return None
        if key not in self._told:
            self._told.add(key)
            self._notes.append(
                f"Loop guard: `{_shown(call)}` failed {n} times with nothing changed in between, so it was "
                "not run again: it would fail the same way. Read its error, then change the call or try "
                "another way."
            )
        return ToolResult(
            f"Not run: this exact call already failed {n} times in this turn and nothing has changed since, so "
            f"it would fail again (its error: {self._last_error.get(key, '')!r}). Change the call, try another "
            "way, or answer with what you know.",
            is_error=True,
            metadata={NOT_RUN_KEY: REPEATED_FAILURE},
        )

    def earlier_result(self, call: ToolCall) -> ToolResult | None:
        """The turn's result of the same read-only call when nothing with side effects ran since; else None."""
        earlier = self._fresh.get((call.name, canonical_arguments(call.arguments)))
        if earlier is None:
            return None
        return earlier.with_content(earlier.content, {**earlier.metadata, NOT_RUN_KEY: REUSED})

    # -- after a call ----------------------------------------------------------------------

    def observe(self, call: ToolCall, result: ToolResult, tool: Tool | None = None) -> int:
        """Record one call and its raw result; returns how often this exact pair has been seen.

        A call with side effects that ran lifts the held masks and forgets the read-only results
        (the world may have changed); one that succeeded also forgets the failures.
        """
        same = (call.name, canonical_arguments(call.arguments))
        digest = hashlib.sha256(normalise_result(result.content).encode("utf-8", "surrogatepass")).hexdigest()
        key = (*same, digest)
        self._seen[key] += 1
        count = self._seen[key]
        self._in_a_row = self._in_a_row + 1 if same == self._last else 1
        self._last = same
        ran = NOT_RUN_KEY not in result.metadata
        self._step.append((call, ran and count == 1))
        if ran:
            self._record_outcome(same, result, tool)
        if count >= self.warn_at:
            self._held[call.name] = None
        elif count >= self.mask_at or self._in_a_row > self.mask_at:
            self._once[call.name] = None  # also a call repeated in a row whose result only ticks (a clock)
        return count

    def _record_outcome(self, same: tuple[str, str], result: ToolResult, tool: Tool | None) -> None:
        side_effects = tool is not None and tool.side_effects
        if side_effects:
            self._held.clear()
            self._fresh.clear()
        if failed(result):
            self._failures[same] += 1
            self._last_error[same] = _first_line(result.content)
            return
        if side_effects:  # it worked: what failed before may work now
            self._failures.clear()
            self._told.clear()
        else:
            self._failures.pop(same, None)
            self._told.discard(same)
        if tool is not None and tool.read_only and not side_effects and not tool.volatile:
            self._fresh[same] = result

    def world_changed(self) -> None:
        """New input arrived mid-run: earlier results and failures may no longer hold, and it is news itself."""
        self._fresh.clear()
        self._failures.clear()
        self._told.clear()
        self._held.clear()
        self._idle = []

    def end_step(self) -> str | None:
        """Close one step (a reply's calls, all answered); the stop message when the run makes no progress."""
        step, self._step = self._step, []
        if not step:
            return None
        if any(new for _, new in step):
            self._idle = []
            return None
        self._idle.append(step)
        return self.no_progress_message() if len(self._idle) >= self.idle_steps else None

    # -- what the model and the user are told ----------------------------------------------

    def take_masked(self) -> tuple[str, ...]:
        """The tools the next reply may not call: repeated since the last request, or held.

        A small model that re-issues a call it already has the result of (greedy decoding makes that
        a fixed point) usually takes the next step once its grammar rules the repeat out.
        """
        names = tuple({**self._held, **self._once})
        self._once = {}
        return names

    def status_lines(self) -> list[str]:
        """What the next request's status says about calls not run (each explained once)."""
        return list(self._notes)

    def delivered(self) -> None:
        """The request that carried :meth:`status_lines` was answered: they are not shown again."""
        self._notes = []

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

    def no_progress_message(self) -> str:
        """The final answer when :attr:`idle_steps` steps in a row brought nothing new."""
        calls = [c for step in self._idle for c, _ in step]
        counts: Counter[tuple[str, str]] = Counter((c.name, canonical_arguments(c.arguments)) for c in calls)
        (name, args), _ = counts.most_common(1)[0]
        top = next(c for c in reversed(calls) if (c.name, canonical_arguments(c.arguments)) == (name, args))
        error = self._last_error.get((name, args)) if self._failures[(name, args)] else None
        what = f"`{_shown(top)}`"
        what += f", which keeps failing ({error!r})" if error else ", whose result did not change"
        return (
            f"Stopped: the last {len(self._idle)} steps brought nothing new — every tool call repeated an earlier "
            f"result or was not run — so the agent was going round in circles, mostly on {what}. The work so far "
            "is in the session. Check that call yourself, then continue the session with more specific "
            "instructions (the file or command to use, what to do when it fails), or rephrase the task."
        )
