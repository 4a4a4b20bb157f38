"""Runs one tool call: parse, validate, hooks, execute with a timeout, cap the output.

Every failure the *model* caused becomes a clear error result for the model (never an
exception): malformed JSON, unknown tool, schema mismatch, tool exception, timeout. The caller
(the agent's runner) passes the plugin hooks in; this module knows nothing about plugins.

Order: ``before`` sees only valid calls of known tools and may answer instead of the tool (a
denial, a refused limit); the output is capped; ``after`` sees every result, errors included,
with the uncapped text in ``metadata["full_content"]`` when it was cut (so a spill can keep it).

Idempotency (ch6 requirement: side-effecting calls are not repeated after a crash): a call of a
tool with ``side_effects=True`` is recorded as started in the caller's :class:`EffectLog` just
before it runs and as finished with its result when it returns; while it runs,
:func:`idempotency_key` gives the tool a key that is stable for that call (so a tool that talks to
a service can dedupe on it).

Long-running tools (``long_running=True``): when the context holds a :class:`BackgroundRunner`
under :data:`BACKGROUND_RESOURCE` (the event runtime puts one there), the call is started as an
async task and answered at once with its task id; the tool's real result arrives later as an
``async.result`` event. Without a runner the call simply runs inline. Any other call that is still
running after the runner's ``background_after_s`` is handed to it the same way (the book's "the
tool is running in the background", ch4 §3.25): a model that ran a long job with ``bash`` instead
of ``start_command`` can still answer the user meanwhile, and cancel the job.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kairos.models.types import ArgumentsError, ToolCall
from kairos.tools.audit import audit_of, outcome_of
from kairos.tools.base import InvalidArguments, Resource, Tool, ToolContext, ToolResult, ToolSet
from kairos.tools.sandbox import call_scope

BeforeTool = Callable[[ToolCall, Tool], Awaitable[ToolResult | None]]
"""Runs before a valid call; returning a result short-circuits the call (e.g. denied)."""
AfterTool = Callable[[ToolCall, Tool | None, ToolResult], Awaitable[ToolResult]]
"""Runs on every result, errors included; returns the (possibly annotated) result."""
ErrorFormatter = Callable[[ToolCall, Tool, dict[str, Any], BaseException], str]
"""Turns a tool's exception into the text the model reads."""

FULL_CONTENT = "full_content"
"""``ToolResult.metadata`` key: the output before the cap cut it (only present when it did)."""

_IDEMPOTENCY_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("kairos_idempotency_key", default=None)


def idempotency_key() -> str | None:
    """The key of the side-effecting call running now (None outside one, or without an effect log).

    Stable for one tool call across a crash and a resume: a tool may pass it to a service that
    deduplicates (``Idempotency-Key`` headers, a mail ``Message-ID``) or check it before acting again.
    """
    return _IDEMPOTENCY_KEY.get()


BACKGROUND_RESOURCE: Resource[BackgroundRunner] = Resource("kairos.background")
"""The :class:`BackgroundRunner` long-running tools are started on (the event runtime puts one there)."""


class ToolFailed(Exception):
    """A long-running tool's call ended in an error result (its task is reported failed)."""


class BackgroundRunner(Protocol):
    """Runs a call in the background as a task of the session (the runtime's async tasks)."""

    @property
    def background_after_s(self) -> float | None:
        """A call still running after this many seconds continues as a task (None or 0: never)."""
        ...

    def start_background(self, title: str, run: Callable[[], Awaitable[str]]) -> str | None:
        """Start ``run``; returns the task id, or None when no task manager runs (then run inline)."""
        ...


class EffectLog(Protocol):
    """Where side-effecting calls are recorded (a session: its database survives the process)."""

    def effect_started(self, call_id: str, tool: str, arguments: dict[str, Any]) -> str:
        """Record that the call is about to run; returns its idempotency key."""
        ...

    def effect_finished(self, call_id: str, result: ToolResult) -> None:
        """Record what the call returned (what a resume gives the model instead of a placeholder)."""
        ...


def basic_error(call: ToolCall, t: Tool, args: dict[str, Any], exc: BaseException) -> str:
    """``Tool 'x' failed: ValueError: …``."""
    return f"Tool '{t.name}' failed: {type(exc).__name__}: {exc}"


@dataclass(frozen=True, slots=True)
class Executed:
    """The outcome of one call."""

    result: ToolResult
    """What the model will see (after the hooks)."""
    raw: ToolResult
    """What the tool (or the harness, for an error) said before any ``after`` hook annotated it."""


async def execute(
    call: ToolCall,
    tools: ToolSet,
    ctx: ToolContext,
    *,
    before: BeforeTool | None = None,
    after: AfterTool | None = None,
    format_error: ErrorFormatter = basic_error,
    effects: EffectLog | None = None,
) -> Executed:
    """Run ``call`` against ``tools``; never raises for anything the model did.

    ``effects``: records calls of side-effecting tools (see the module docstring). Every call gets a
    line in the session's audit log (:mod:`kairos.tools.audit`), whatever its outcome.
    """
    t = tools.get(call.name)
    audit = audit_of(ctx)
    try:
        with call_scope():  # what the permission check grants (network) holds for this call only
            raw = await _run(call, t, tools, ctx, before, format_error, effects)
    except asyncio.CancelledError:
        audit.record(
            session=ctx.session_id, call_id=call.id, tool=call.name, arguments=_args(call), outcome="cancelled"
        )
        raise
    audit.record(
        session=ctx.session_id, call_id=call.id, tool=call.name, arguments=_args(call), outcome=outcome_of(raw)
    )
    result = await after(call, t, raw) if after is not None else raw
    return Executed(result, raw)


async def _run(
    call: ToolCall,
    t: Tool | None,
    tools: ToolSet,
    ctx: ToolContext,
    before: BeforeTool | None,
    format_error: ErrorFormatter,
    effects: EffectLog | None = None,
) -> ToolResult:
    if t is None:
        names = ", ".join(tools.names()) or "(none)"
        return ToolResult.harness_error(f"Unknown tool '{call.name}'. Available tools: {names}.")
    try:
        args = call.parsed_arguments()
    except ArgumentsError as e:
        return ToolResult.harness_error(
            f"The arguments for '{t.name}' are {e}: {call.arguments[:500]!r}. "
            f"Send one JSON object matching: {_schema(t)}"
        )
    try:
        t.validate(args)
    except InvalidArguments as e:
        return ToolResult.harness_error(str(e))
    if before is not None:
        verdict = await before(call, t)
        if verdict is not None:
            return verdict
    if effects is None or not t.side_effects:
        return await _start_or_call(call, t, args, ctx, format_error)
    token = _IDEMPOTENCY_KEY.set(effects.effect_started(call.id, t.name, args))
    try:
        result = await _start_or_call(call, t, args, ctx, format_error)
    finally:
        _IDEMPOTENCY_KEY.reset(token)
    effects.effect_finished(call.id, result)  # not on cancel: it stays "started", its effect unknown
    return result


async def _start_or_call(
    call: ToolCall, t: Tool, args: dict[str, Any], ctx: ToolContext, format_error: ErrorFormatter
) -> ToolResult:
    """A long-running tool as a background task when a runner is there; a slow call handed over; the rest inline."""
    runner = ctx.get(BACKGROUND_RESOURCE)
    title = f"{t.name}({json.dumps(args, ensure_ascii=False)[:200]})"
    if runner is not None and t.long_running:

        async def in_background() -> str:  # its task copies this context, so idempotency_key() still works
            return _text_or_raise(await _call(call, t, args, ctx, format_error))

        task_id = runner.start_background(title, in_background)
        if task_id is None:
            return await _call(call, t, args, ctx, format_error)
        return ToolResult(
            f"Started in the background as task {task_id}. Its result will arrive as an event; meanwhile "
            f"task_status('{task_id}') shows progress and cancel_task('{task_id}') stops it.",
            metadata={"task_id": task_id},
        )
    after_s = runner.background_after_s if runner is not None else None
    if runner is None or not after_s or after_s >= t.timeout_s:  # None or 0: never
        return await _call(call, t, args, ctx, format_error)
    running = asyncio.ensure_future(_call(call, t, args, ctx, format_error))
    try:
        done, _ = await asyncio.wait({running}, timeout=after_s)
    except asyncio.CancelledError:
        running.cancel()
        raise
    if done:
        return running.result()

    async def the_rest() -> str:  # cancelling the task cancels the call it awaits
        return _text_or_raise(await running)

    task_id = runner.start_background(title, the_rest)
    if task_id is None:
        return await running
    return ToolResult(
        f"Still running after {after_s:g} s, so it goes on in the background as task {task_id}. Its result "
        f"will arrive as an event; meanwhile answer the user, task_status('{task_id}') shows progress and "
        f"cancel_task('{task_id}') stops it.",
        metadata={"task_id": task_id, "background_after_s": after_s},
    )


def _text_or_raise(result: ToolResult) -> str:
    """A background call's result text; an error result ends its task "failed", with this text."""
    if result.is_error:
        raise ToolFailed(result.content)
    return result.content


async def _call(
    call: ToolCall, t: Tool, args: dict[str, Any], ctx: ToolContext, format_error: ErrorFormatter
) -> ToolResult:
    try:
        async with asyncio.timeout(t.timeout_s):  # no extra task, unlike wait_for: one loop step less
            result = await t.call(args, ctx)
    except TimeoutError:
        return ToolResult.harness_error(
            f"Tool '{t.name}' timed out after {t.timeout_s:g} s and was stopped. "
            "Try a smaller request or another approach.",
            timeout_s=t.timeout_s,
        )
    except asyncio.CancelledError:
        raise
    except Exception as e:  # a tool bug must reach the model as a result, never crash the run
        return ToolResult(format_error(call, t, args, e), is_error=True, metadata={"exception": e})
    return cap_output(result, t.max_output_chars)


def _args(call: ToolCall) -> dict[str, Any] | str:
    try:
        return call.parsed_arguments()
    except ArgumentsError:
        return call.arguments


def _schema(t: Tool) -> str:
    return json.dumps(t.spec.parameters, ensure_ascii=False)


def cap_output(result: ToolResult, limit: int) -> ToolResult:
    """Truncate with an explicit notice so the model knows it saw only part of the output."""
    n = len(result.content)
    if n <= limit:
        return result
    total = result.metadata.get("total_bytes")
    size = f"{n:,} characters" if total is None else f"{n:,} characters kept of {int(total):,} bytes produced"
    where = result.metadata.get("full_output")
    notice = f"\n[output truncated: showing the first {limit:,} of {size}."
    notice += f" The full output is in {where}." if where else ""
    notice += " Ask for less (offset/limit, a narrower pattern or path) to see the rest.]"
    metadata = {**result.metadata, "truncated_from": n, FULL_CONTENT: result.content}
    return result.with_content(result.content[:limit] + notice, metadata)
