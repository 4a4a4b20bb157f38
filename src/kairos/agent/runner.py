"""The runner drives one session with one agent (book ch2 §3.1, ch6 §3.1-3.3).

Per model call: drain the inbox and let plugins append at the safe point, build the request
(views, trailing status, window check), stream the reply, append it verbatim, run the tools it
asked for concurrently and append each result the moment it finishes. Repeat until a reply has
no tool calls and the inbox is empty.

Safe points and preemption: the inbox is drained before every request and before a final
answer is returned (a message that arrived meanwhile is taken up instead of ending the run).
While the model streams or tools run, the loop races them against a preempting event; until the
reply's first token, the user's input preempts too (a long prompt read is no reason to wait).
Unfinished tools get the placeholder result (rule 3 of ch6 §3.3). Then either the run ends (an
immediate interrupt; the partial text the user saw is kept) or the loop goes on with the new event
(the cut reply is dropped, rule 4). Several events taken up at one safe point are numbered
``[Unprocessed Event i/N]`` with a count by type (rule 5). Task cancellation and closing
the event iterator leave the same valid trajectory. Tool-call ids are made unique per session,
so each call gets exactly one result.

The parts live beside it: the safe points in :mod:`~kairos.agent._safe_points`, the request's
window check in :mod:`~kairos.agent._budget`, the model call in :mod:`~kairos.agent._stream` and
:mod:`~kairos.agent._reply`, the tool phase in :mod:`~kairos.agent._tools`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kairos.agent._budget import build_within_budget
from kairos.agent._reply import fed, guarded_reply, unique_ids
from kairos.agent._safe_points import drain, drain_control, ends_run, turn_start
from kairos.agent._state import TOOLS_KEY, RunState, restore_order
from kairos.agent._stream import Preempted as _Preempted
from kairos.agent._stream import stream_model
from kairos.agent._tools import run_tools
from kairos.agent.events import (
    Activity,
    AgentEvent,
    FinalAnswer,
    ModelDeltaEvent,
    Notice,
    RequestStats,
    RunError,
)
from kairos.agent.guard import LoopGuard
from kairos.context.inbox import Posted, UserInput
from kairos.context.layout import LAYOUT_KEY, describe_tool_choice
from kairos.context.session import Session
from kairos.errors import KairosError
from kairos.models.types import (
    AllBut,
    Message,
    ModelNotice,
    ModelProgress,
    ModelResponse,
    ResponseDone,
    TextDelta,
    ToolCall,
    ToolCallDelta,
)
from kairos.tools.base import FOCUS_RESOURCE, Resource, Tool, ToolSource

if TYPE_CHECKING:
    from kairos.agent.agent import Agent

_STATE_KEY = "kairos.run"
_RUNNER_IDS = itertools.count(1)


class _OpenFailed(Exception):
    """Internal: a guard plugin could not open for the session."""

    def __init__(self, message: str, reports: list[AgentEvent]) -> None:
        super().__init__(message)
        self.reports = reports


@dataclass
class _Step:
    """How one model step went (an async generator cannot return a value)."""

    reply: Message | None = None
    response: ModelResponse | None = None
    retry: bool = False
    """Preempted by an event that does not end the run: call the model again."""


class Runner:
    """Runs an :class:`~kairos.agent.agent.Agent` on sessions; see the module docstring."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        # not id(self): a later runner may reuse a dead one's id
        self._key: Resource[RunState] = Resource(f"{_STATE_KEY}.{next(_RUNNER_IDS)}")

    # -- per-session state ----------------------------------------------------------------

    async def _current_tools(self) -> tuple[list[Tool], tuple[str, ...]]:
        tools: list[Tool] = []
        prints: list[str] = []
        for item in self.agent.all_tools():
            if isinstance(item, ToolSource):
                prints.append(item.fingerprint())
                tools.extend(await item.list_tools())
            else:
                prints.append(item.name)
                tools.append(item)
        return tools, tuple(prints)

    async def _state(self, session: Session) -> RunState:
        """The session's run state, opening the plugins on first use.

        Raises:
            _OpenFailed: a guard plugin could not open (the others were closed again).
        """
        st = session.state.get(self._key)
        if st is not None:
            return st
        tools, prints = await self._current_tools()
        snapshot, version = restore_order(session, tools)
        st = RunState(self.agent, session, snapshot, prints, version)
        st.call_ids = {c.id for m in session.message_list() for c in m.tool_calls}
        failed = await self.agent.pipeline.open(st, st.report)
        if failed is not None:
            await self.agent.pipeline.close(st, st.report)
            raise _OpenFailed(failed, st.flush())
        session.state.put(self._key, st)

        async def close() -> None:
            await self.agent.pipeline.close(st, st.report)

        session.on_close(close)
        return st

    async def context(self, session: Session) -> RunState:
        """The run state of ``session`` (see :meth:`Agent.context <kairos.agent.agent.Agent.context>`)."""
        try:
            return await self._state(session)
        except _OpenFailed as e:
            raise KairosError(str(e)) from e

    async def _refresh_tools(self, st: RunState, *, mid_turn: bool = False) -> str | None:
        """Take up changed tool sources (appended, never reordered).

        At a turn start every source counts. Between model calls (``mid_turn``) only a change of
        sources that ask for it (``refresh_mid_turn = True``: tools loaded by discover_tools, meant
        for the same turn) is taken; any other change, such as an MCP server's list_changed, waits for
        the next turn start, so a turn keeps the tools it started with.
        """
        if not self.agent.tool_sources:
            return None
        items = self.agent.all_tools()
        prints = tuple(t.fingerprint() if isinstance(t, ToolSource) else t.name for t in items)
        if prints == st.fingerprints:
            return None
        if mid_turn and (
            len(prints) != len(st.fingerprints)
            or any(
                new != old and not (isinstance(item, ToolSource) and item.refresh_mid_turn)
                for item, new, old in zip(items, prints, st.fingerprints, strict=True)
            )
        ):
            return None
        tools, prints = await self._current_tools()
        st.fingerprints = prints
        snapshot, change = st.tools.updated(tools)
        if change is None:
            return None
        st.tools = snapshot
        st.tools_version += 1
        st.live.freeze(f"{TOOLS_KEY}{st.tools_version}", json.dumps(snapshot.names()))
        st.deliberate = f"tools: {change}"
        return change

    # -- the loop -------------------------------------------------------------------------

    async def run(
        self, session: Session, input: str | None = None, opening: Sequence[ToolCall] = ()
    ) -> AsyncIterator[AgentEvent]:
        """Post ``input`` (if any) and run until the model answers; yields events as they happen.

        ``opening``: calls the harness makes on the model's behalf before its first request (``kairos
        run --browser --url`` opens the page): stored as an assistant reply with their results, so
        what they return is a tool result (external content), not part of the user's words.
        With nothing posted and nothing pending, it yields nothing.
        """
        direct: Posted | None = None
        if input is not None:
            if len(session.inbox):
                session.post(UserInput(input))  # after what waits already, in order
            else:  # nothing else pending: the input is appended (persisted) as the run starts
                direct = Posted(0, UserInput(input), time.time())
        session.inbox.bind()
        try:
            st = await self._state(session)
        except _OpenFailed as e:
            for event in e.reports:
                yield event
            yield RunError(str(e))
            return
        for event in st.flush():
            yield event
        change = await self._refresh_tools(st)
        if change:
            yield Notice(f"the tool set changed: {change}", "tools")
        drained = drain(st, at_start=True, direct=direct)
        if drained.stop is not None:
            yield FinalAnswer("Interrupted before the turn started.", stop_reason="interrupted")
            return
        if not drained.appended:
            return
        session.tool_context.put(FOCUS_RESOURCE, _newest_request(session.messages))
        after_turn = drained.after_turn
        async for event in turn_start(st):
            yield event
        guard = st.guard = LoopGuard()
        if opening:
            try:
                async for event in self._opening(st, opening, guard):
                    yield event
            except _Preempted:
                if ends_run(session):
                    yield FinalAnswer("Interrupted while tools were running.", stop_reason="interrupted")
                    return
        first = True
        for _ in range(self.agent.max_iterations):
            if not first:
                drained = drain(st, hold=after_turn)
                after_turn = after_turn or drained.after_turn
                if drained.stop is not None:
                    yield FinalAnswer("Interrupted.", stop_reason="interrupted")
                    return
                if drained.appended:
                    guard.world_changed()  # new input: what was read or failed before may have changed
                # a source that grew mid-turn (discover_tools loaded tools): appended, never reordered
                if change := await self._refresh_tools(st, mid_turn=True):
                    yield Notice(f"the tool set changed: {change}", "tools")
            first = False
            step = _Step()
            async with aclosing(self._model_step(st, guard, after_turn, step)) as model_events:
                async for event in model_events:
                    yield event
            if step.retry:
                continue  # rule 4 (ch6 §3.3): the cut reply is dropped; the model starts afresh with the event
            if step.reply is None or step.response is None:
                return  # the step ended the run (an error, an interrupt) and said so
            reply, response = step.reply, step.response
            if not reply.tool_calls:
                if response.finish_reason == "length":
                    yield FinalAnswer(reply.content, stop_reason="length")
                    return
                if not after_turn and session.inbox.has_messages():
                    continue  # safe point before the final answer: take up what arrived meanwhile
                if after_turn:
                    drain_control(session)
                yield FinalAnswer(reply.content)
                return
            stop: str | None = None
            yield Activity("tool", detail=", ".join(dict.fromkeys(c.name for c in reply.tool_calls)))
            try:
                async with aclosing(run_tools(st, reply.tool_calls, guard)) as tool_events:
                    async for ev in tool_events:
                        if isinstance(ev, str):
                            stop = stop or ev
                        else:
                            yield ev
            except _Preempted:
                if ends_run(session):
                    yield FinalAnswer("Interrupted while tools were running.", stop_reason="interrupted")
                    return
                continue
            for event in st.flush():
                yield event
            stop = guard.end_step() if stop is None else stop
            if stop is not None:
                yield FinalAnswer(stop, stop_reason="loop_guard")
                return
        yield FinalAnswer(
            f"Stopped after {self.agent.max_iterations} model calls without a final answer (max_iterations). "
            "The work so far is in the session; continue it or raise max_iterations.",
            stop_reason="max_iterations",
        )

    async def _opening(self, st: RunState, calls: Sequence[ToolCall], guard: LoopGuard) -> AsyncIterator[AgentEvent]:
        """The harness's own calls, run like the model's (same permissions, hooks and events)."""
        reply = unique_ids(Message.assistant(tool_calls=tuple(calls)), st.call_ids)
        st.live.append(reply)
        async with aclosing(run_tools(st, reply.tool_calls, guard)) as tool_events:
            async for ev in tool_events:
                if not isinstance(ev, str):
                    yield ev
        for event in st.flush():
            yield event

    async def _model_step(
        self, st: RunState, guard: LoopGuard, after_turn: bool, step: _Step
    ) -> AsyncGenerator[AgentEvent, None]:
        """One model call: the safe point, the request, the reply streamed past the guards and stored with its trace.

        ``step`` says how it went: a stored reply, a preemption to retry after, or neither (the run
        ended here, with a :class:`FinalAnswer` or a :class:`RunError` already yielded).
        """
        session = st.live
        await self.agent.pipeline.at_safe_point(st, "before_request", st.append_from("before_request"), st.report)
        for event in st.flush():
            yield event
        try:
            request, estimate = await build_within_budget(st)
        except KairosError as e:
            for event in st.flush():
                yield event
            yield RunError(str(e), e)
            return
        request = await self.agent.pipeline.tool_choice(st, request, st.report)
        if (masked := guard.take_masked()) and request.tool_choice == "auto":
            request = dataclasses.replace(request, tool_choice=AllBut(masked))
        audit = st.auditor.audit(request, st.deliberate)
        st.deliberate = None
        await self.agent.pipeline.on_request(st, request, st.report)
        for event in st.flush():
            yield event
        guards = self.agent.pipeline.reply_guards(st, st.report)
        response: ModelResponse | None = None
        partial: list[str] = []  # text shown so far (past the reply guards): kept when cut short
        yield Activity("waiting")  # until the backend says more (a local model: how far it has read)
        thinking = False
        try:
            async with aclosing(
                stream_model(self.agent.model, st.live.inbox, request, join_input=not after_turn)
            ) as model_events:
                async for item in model_events:
                    if isinstance(item, ResponseDone):
                        response = item.response
                    elif isinstance(item, ModelNotice):
                        yield Notice(item.text, "model")
                    elif isinstance(item, ModelProgress):
                        yield Activity(item.stage, item.done, item.total)
                    else:
                        delta = item
                        if isinstance(delta, TextDelta):
                            text = fed(guards, delta.text)
                            if not text:
                                continue
                            delta = TextDelta(text)
                            partial.append(text)
                        elif isinstance(delta, ToolCallDelta) and delta.name:
                            yield Activity("generating", detail=delta.name)
                        elif not thinking:  # reasoning: not shown, but the model is at work
                            thinking = True
                            yield Activity("generating")
                        yield ModelDeltaEvent(delta)
        except _Preempted:
            heard = session.inbox.heard()
            if ends_run(session):  # the turn ends here: keep the text the user saw (or, by voice, heard)
                kept = _heard_part(partial, heard)
                _keep_partial(session, kept)
                yield FinalAnswer("".join(kept), stop_reason="interrupted")
                return
            step.retry = True  # rule 4 (ch6 §3.3): the cut reply is dropped; the model starts afresh with the event
            return
        except (asyncio.CancelledError, GeneratorExit):
            _keep_partial(session, partial)
            raise
        except Exception as e:  # the model backend failed: tell the user, keep the trajectory
            yield RunError(f"model call failed: {e}", e)
            return
        if response is None:
            yield RunError(f"model {self.agent.model.name!r} ended without a response")
            return
        reply, tail = guarded_reply(response.message, guards, bool(partial))
        if tail:
            yield ModelDeltaEvent(TextDelta(tail))
        reply = unique_ids(reply, st.call_ids)
        stats = RequestStats(session.request_count, response.usage, audit, estimate)
        trace = {**stats.to_record(), "tool_choice": describe_tool_choice(request.tool_choice)}
        trace[LAYOUT_KEY] = st.layout.record(request, st.added)
        st.added = []
        session.append(reply, request=trace)  # the reply and its trace: one row
        guard.delivered()
        step.reply, step.response = reply, response
        yield stats


def _newest_request(messages: Sequence[Message]) -> str:
    """The text of the newest user-role message (typed or an event): the turn's focus for long tool outputs."""
    return next((m.content for m in reversed(messages) if m.role == "user"), "")


def _heard_part(partial: list[str], heard: str | None) -> list[str]:
    """The shown text, or what a voice barge-in says the user heard of it (a prefix of the reply's text)."""
    if heard is None:
        return partial
    return [heard] if heard else []


def _keep_partial(session: Session, partial: list[str]) -> None:
    text = "".join(partial)
    if text:
        session.append(Message.assistant(text))
