"""The tools the agent sets, cancels and lists its timers with (:class:`~kairos.runtime.integrations.timers.Timers`)."""

from __future__ import annotations

from typing import Any

from kairos.errors import KairosError
from kairos.runtime.handle import caller_of
from kairos.runtime.integrations.timers import Timers, _iso
from kairos.runtime.runtime import runtime_service
from kairos.tools.base import Tool, ToolContext, ToolResult
from kairos.tools.function import tool

_MISSING = "the timers service is not enabled in this runtime; ask the user to enable it"


@tool(side_effects=True)
async def set_timer(
    message: str,
    ctx: ToolContext,
    at: str = "",
    after_s: float = 0,
    every_s: float = 0,
    cron: str = "",
    timezone: str = "UTC",
) -> dict[str, Any] | ToolResult:
    """Set a timer that wakes you later with `message` (give exactly one of at, after_s, every_s, cron).

    Use it to follow something up, retry later, poll a service that does not push, or for recurring
    work. You get the message back as a timer event when it fires.

    Args:
        message: what to do when it fires (you will read it then).
        at: one time, ISO 8601, e.g. "2026-05-01T09:00:00" (read in `timezone` without an offset).
        after_s: once, this many seconds from now.
        every_s: repeatedly, every this many seconds.
        cron: repeatedly, a cron expression, e.g. "0 9 * * 5" (Fridays 09:00), read in `timezone`.
        timezone: IANA time zone for `at` and `cron`, e.g. "Europe/Paris".
        ctx: injected by the harness (not shown to the model).
    """
    found = runtime_service(ctx, Timers, _MISSING)
    if isinstance(found, ToolResult):
        return found
    timers, session = found
    try:
        t = timers.add(
            session, message, at=at, after_s=after_s, every_s=every_s, cron=cron, timezone=timezone,
            caller=caller_of(ctx),
        )  # fmt: skip
    except (ValueError, KairosError) as e:
        return ToolResult(f"Timer not set: {e}", is_error=True)
    return {"timer_id": t.id, "schedule": t.schedule(), "next_due": _iso(t.next_due)}


@tool(side_effects=True)
async def cancel_timer(timer_id: str, ctx: ToolContext) -> str | ToolResult:
    """Cancel one of your timers.

    Args:
        timer_id: the id set_timer returned (see list_timers).
        ctx: injected by the harness (not shown to the model).
    """
    found = runtime_service(ctx, Timers, _MISSING)
    if isinstance(found, ToolResult):
        return found
    timers, session = found
    try:
        if timers.cancel(timer_id, session, caller_of(ctx)):
            return f"Timer {timer_id} cancelled."
    except KairosError as e:
        return ToolResult(str(e), is_error=True)
    return ToolResult(f"No timer {timer_id!r} in this session; list_timers shows yours.", is_error=True)


@tool(read_only=True, volatile=True)
async def list_timers(ctx: ToolContext) -> list[dict[str, Any]] | ToolResult:
    """List your timers, soonest first."""
    found = runtime_service(ctx, Timers, _MISSING)
    if isinstance(found, ToolResult):
        return found
    timers, session = found
    return [t.to_record() for t in timers.list(session, caller_of(ctx))]


def timer_tools() -> list[Tool]:
    """set_timer, cancel_timer, list_timers."""
    return [set_timer, cancel_timer, list_timers]


__all__ = ["cancel_timer", "list_timers", "set_timer", "timer_tools"]
