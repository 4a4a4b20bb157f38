"""The tool phase of a step: every call of one reply run concurrently, each result stored as it can be.

A call passes the loop guard and the plugins' ``before_tool``/``after_tool`` hooks around the
executor. Results enter the trajectory in call order, yet none is lost to a crash or a preemption:
an early finisher is persisted on the side, and every call left without a result gets one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncGenerator, Sequence

from kairos.agent._state import RunState
from kairos.agent._stream import Preempted
from kairos.agent.events import AgentEvent, ToolCallFinished, ToolCallStarted
from kairos.agent.guard import REUSED, REUSED_NOTE, LoopGuard
from kairos.context.session import early_result_key
from kairos.models.types import Image, Message, ToolCall
from kairos.tools.audit import NOT_RUN_KEY
from kairos.tools.base import Tool, ToolResult
from kairos.tools.executor import Executed, execute


async def _execute(st: RunState, call: ToolCall) -> Executed:
    pipeline = st.agent.pipeline

    async def before(c: ToolCall, t: Tool) -> ToolResult | None:
        # a repeated failure is refused before the plugins (nothing to approve); a declared limit or a
        # denial still applies to a read-only repeat, which is otherwise answered from the first result
        if (refusal := st.guard.refusal(c)) is not None:
            return refusal
        verdict = await pipeline.before_tool(st, c, t, st.report) if pipeline.hooked["before_tool"] else None
        return verdict if verdict is not None else st.guard.earlier_result(c)

    async def after(c: ToolCall, t: Tool | None, r: ToolResult) -> ToolResult:
        return await pipeline.after_tool(st, c, t, r, st.report)

    return await execute(
        call,
        st.tools,
        st.live.tool_context,
        before=before,
        after=after if pipeline.hooked["after_tool"] else None,
        format_error=pipeline.format_error,
        effects=st.live,
    )


async def run_tools(
    st: RunState, calls: Sequence[ToolCall], guard: LoopGuard
) -> AsyncGenerator[AgentEvent | str, None]:
    """Run every call of one reply concurrently; yield each result as it finishes.

    Results enter the trajectory in call order (a run is reproducible whatever finishes first);
    one that finishes before an earlier sibling is persisted at once on the side
    (:func:`~kairos.context.session.early_result_key`), so a crash loses no finished result.
    Yields a ``str`` (the loop guard's stop message) when the agent is looping.

    Raises:
        Preempted: a preempting event arrived before every call finished.
    """
    session = st.live
    started: dict[asyncio.Task[Executed], tuple[ToolCall, float]] = {}
    ready: dict[str, str] = {}
    images: dict[str, tuple[Image, ...]] = {}
    """The images a result carries (a screenshot) go into its message with the text."""
    appended = 0

    def flush_ready() -> None:
        nonlocal appended
        batch = []
        while appended < len(calls) and calls[appended].id in ready:
            c = calls[appended]
            batch.append(Message.tool(c.id, ready[c.id], c.name, images.get(c.id, ())))
            appended += 1
        session.append(*batch)

    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    unwatch = None
    try:
        for call in calls:
            yield ToolCallStarted(call)
        for call in calls:
            task = asyncio.create_task(_execute(st, call), name=f"tool:{call.name}:{call.id}")
            started[task] = (call, time.perf_counter())
        unwatch = session.inbox.watch_preempt(lambda: _resolve(waiter))
        remaining = set(started)
        while remaining:
            done, _ = await asyncio.wait(remaining | {waiter}, return_when=asyncio.FIRST_COMPLETED)
            for task in remaining & done:
                remaining.discard(task)
                call, t0 = started[task]
                executed = task.result()
                result = executed.result
                count = guard.observe(call, executed.raw, st.tools.get(call.name))
                if executed.raw.metadata.get(NOT_RUN_KEY) == REUSED:  # said after the hooks: not tool output
                    result = dataclasses.replace(result, content=result.content + REUSED_NOTE)
                if count >= guard.warn_at:
                    result = dataclasses.replace(result, content=result.content + guard.warning(call, count))
                ready[call.id] = result.content
                if result.images:
                    images[call.id] = result.images
                if call is not calls[appended]:
                    session.freeze(early_result_key(call.id), result.content)
                flush_ready()
                yield ToolCallFinished(call, result, time.perf_counter() - t0)
                if count >= guard.stop_at:
                    yield guard.stop_message(call, count)
            if waiter in done and remaining:
                raise Preempted
    finally:
        if unwatch is not None:
            unwatch()
        waiter.cancel()
        running = [t for t in started if not t.done()]
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        for c in calls[appended:]:  # every call gets exactly one result, whatever ended the phase
            if c.id not in ready:  # the placeholder, or what a side-effecting call recorded
                ready[c.id] = session.cut_result(c.id)
        flush_ready()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
