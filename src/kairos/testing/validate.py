"""Structural invariants of a trajectory, for tests to check after runs, crashes and resumes."""

from __future__ import annotations

from collections.abc import Sequence

from kairos.models.types import Message


def trajectory_problems(messages: Sequence[Message]) -> list[str]:
    """Every way ``messages`` breaks the tool-call protocol; empty when valid.

    Rules: each assistant tool call is answered by exactly one ``tool`` message, and those
    answers come right after the assistant message (in any order, before anything else).
    """
    problems: list[str] = []
    i = 0
    while i < len(messages):
        m = messages[i]
        if m.role == "tool":
            problems.append(f"messages[{i}]: tool result {m.tool_call_id!r} answers no pending call")
            i += 1
            continue
        i += 1
        if m.role != "assistant" or not m.tool_calls:
            continue
        wanted = [c.id for c in m.tool_calls]
        if len(set(wanted)) != len(wanted):
            problems.append(f"messages[{i - 1}]: duplicate tool call ids {wanted}")
        seen: list[str] = []
        while i < len(messages) and messages[i].role == "tool":
            seen.append(messages[i].tool_call_id or "")
            i += 1
        missing = [c for c in wanted if c not in seen]
        extra = [c for c in seen if c not in wanted]
        dupes = {c for c in seen if seen.count(c) > 1}
        if missing:
            problems.append(f"calls {missing} have no result")
        if extra:
            problems.append(f"results {extra} answer no call of the preceding assistant message")
        if dupes:
            problems.append(f"calls {sorted(dupes)} have more than one result")
    return problems
