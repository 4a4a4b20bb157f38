"""Invariants of the agent loop, on the scripted model."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kairos.agent import Agent, Plugin, RunContext
from kairos.agent.events import Activity, AgentEvent, FinalAnswer, RequestStats, RunError
from kairos.context.builder import BasicStatus
from kairos.context.session import INTERRUPTED_TOOL_RESULT, Session, SessionStore
from kairos.errors import ModelUnavailableError
from kairos.models.types import SystemPrompt
from kairos.testing import ScriptedModel, call, reply, trajectory_problems
from kairos.tools.base import Tool
from kairos.tools.function import tool
from tests.support.tools import add, echo, explode, slow


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=7)
        return self.now


def make_agent(model: ScriptedModel, tools: list[Tool] | None = None, **kw: Any) -> Agent:
    return Agent(
        model,
        tools=tools if tools is not None else [add, echo, explode, slow],
        system=SystemPrompt("You are a test agent.", "Deployment: tests."),
        status=BasicStatus(FakeClock()),
        **kw,
    )


async def collect(agent: Agent, session: Session, text: str) -> list[AgentEvent]:
    return [e async for e in agent.run(session, text)]


def final(events: list[AgentEvent]) -> FinalAnswer:
    finals = [e for e in events if isinstance(e, FinalAnswer)]
    assert len(finals) == 1
    return finals[0]


def tool_messages(session: Session) -> list[str]:
    return [m.content for m in session.messages if m.role == "tool"]


async def test_tool_round_trip_pairs_ids_and_keeps_assistant_verbatim(session: Session) -> None:
    c1, c2 = call("add", {"a": 2, "b": 3}), call("echo", {"text": "hi"})
    model = ScriptedModel([reply("", c1, c2), reply("5 and hi")])
    events = await collect(make_agent(model), session, "go")
    assert final(events).text == "5 and hi"
    roles = [m.role for m in session.messages]
    assert roles == ["user", "assistant", "tool", "tool", "assistant"]
    assert session.messages[1].tool_calls == (c1, c2)
    assert [m.tool_call_id for m in session.messages[2:4]] == [c1.id, c2.id]
    assert tool_messages(session) == ["5", "hi"]
    assert trajectory_problems(session.messages) == []


async def test_every_request_extends_the_previous_one_byte_exactly(session: Session) -> None:
    model = ScriptedModel(
        [reply("", call("add", {"a": 1, "b": 1})), reply("2"), reply("", call("echo", {"text": "x"})), reply("x")]
    )
    agent = make_agent(model)
    events = await collect(agent, session, "first") + await collect(agent, session, "second")
    stats = [e for e in events if isinstance(e, RequestStats)]
    assert [s.audit.ok for s in stats] == [True] * 4
    assert stats[0].audit.first_request and not stats[1].audit.first_request
    reqs = model.requests
    for prev, nxt in zip(reqs, reqs[1:], strict=False):
        assert prev.system == nxt.system
        assert [t.serialized() for t in prev.tools] == [t.serialized() for t in nxt.tools]
        stable_prev = [m.serialized() for m in prev.messages[: prev.stable_prefix_len]]
        assert [m.serialized() for m in nxt.messages[: len(stable_prev)]] == stable_prev


async def test_no_dynamic_value_in_system_prompt_or_tools(session: Session) -> None:
    model = ScriptedModel([reply("a"), reply("b")])
    agent = make_agent(model)
    await collect(agent, session, "one")
    await collect(agent, session, "two")
    first, second = model.requests
    assert first.system == second.system and first.tools == second.tools
    # the clock advanced, and time lives only in the trailing status message
    assert first.messages[-1].content != second.messages[-1].content
    assert "2026-01-02" in second.messages[-1].content and (second.messages[-1].origin is not None)
    assert "2026" not in second.system
    assert all("2026" not in t.serialized() for t in second.tools)
    assert second.stable_prefix_len == len(second.messages) - 1


async def test_tool_order_is_fixed_regardless_of_registration(store: SessionStore) -> None:
    names = []
    for order in ([echo, add, slow], [slow, add, echo]):
        model = ScriptedModel([reply("ok")])
        s = store.new()
        await collect(make_agent(model, tools=order), s, "hi")
        await s.aclose()
        names.append([t.name for t in model.requests[0].tools])
    assert names[0] == names[1] == ["add", "echo", "slow"]


async def test_independent_calls_run_concurrently(session: Session) -> None:
    gate_a, gate_b = asyncio.Event(), asyncio.Event()

    @tool
    async def ping() -> str:
        """Set A, wait for B."""
        gate_a.set()
        await gate_b.wait()
        return "ping"

    @tool
    async def pong() -> str:
        """Wait for A, set B."""
        await gate_a.wait()
        gate_b.set()
        return "pong"

    model = ScriptedModel([reply("", call("ping"), call("pong")), reply("ok")])
    # run sequentially, these two would deadlock: ping waits for pong
    events = await asyncio.wait_for(collect(make_agent(model, [ping, pong]), session, "go"), timeout=10)
    assert final(events).text == "ok"
    assert tool_messages(session) == ["ping", "pong"]


async def test_model_unreachable_is_a_clear_error_and_keeps_the_trajectory(session: Session) -> None:
    model = ScriptedModel([ModelUnavailableError("server down after 4 attempts", model="m", attempts=4)])
    events = await collect(make_agent(model), session, "hello")
    errors = [e for e in events if isinstance(e, RunError)]
    assert len(errors) == 1 and "server down after 4 attempts" in errors[0].message
    assert [m.content for m in session.messages] == ["hello"]


async def test_max_iterations_ends_cleanly(session: Session) -> None:
    model = ScriptedModel([reply("", call("add", {"a": i, "b": 0})) for i in range(10)])
    events = await collect(make_agent(model, max_iterations=3), session, "go")
    end = final(events)
    assert end.stop_reason == "max_iterations" and "max_iterations" in end.text
    assert len(model.requests) == 3
    assert trajectory_problems(session.messages) == []


async def test_context_overflow_is_refused_with_a_clear_error(session: Session) -> None:
    model = ScriptedModel([reply("never")], context_window=1200)
    events = await collect(make_agent(model), session, "x" * 8000)
    err = [e for e in events if isinstance(e, RunError)]
    assert err and "prompt tokens" in err[0].message and "window" in err[0].message
    assert model.requests == []


async def test_overflow_hook_can_shrink_the_request(session: Session) -> None:
    model = ScriptedModel([reply("fits")], context_window=1200)
    calls = []

    class Shrink(Plugin):
        async def on_overflow(self, ctx: RunContext, request: Any, tokens: int, limit: int) -> Any:
            calls.append((tokens, limit))
            small = request.messages[-1:]
            return type(request)(request.system_static, "", (), small, request.max_tokens, 0.0, 0)

    agent = make_agent(model, plugins=[Shrink()])
    events = await collect(agent, session, "y" * 8000)
    assert final(events).text == "fits" and calls and calls[0][0] > calls[0][1]


async def test_interrupt_while_model_streams_keeps_partial_text(session: Session) -> None:
    model = ScriptedModel([reply("a long answer that streams slowly")], delay_s=0.02, chunk=4)
    agent = make_agent(model)
    events: list[AgentEvent] = []
    async for e in agent.run(session, "talk"):
        events.append(e)
        if len(events) == 2:
            session.interrupt()
    end = final(events)
    assert end.stop_reason == "interrupted"
    kept = session.messages[-1]
    assert kept.role == "assistant" and kept.content and "a long answer".startswith(kept.content[:4])
    assert kept.reasoning is None
    assert trajectory_problems(session.messages) == []


async def test_interrupt_during_prefill_before_any_delta(session: Session) -> None:
    asked = asyncio.Event()

    def answer(request: Any) -> Any:
        asked.set()
        return reply("never seen")

    model = ScriptedModel([answer], delay_s=30)
    agent = make_agent(model)

    async def interrupt_soon() -> None:
        await asked.wait()
        session.interrupt()

    task = asyncio.ensure_future(interrupt_soon())
    events = await asyncio.wait_for(collect(agent, session, "hi"), timeout=10)
    await task
    assert final(events).stop_reason == "interrupted"
    assert [m.role for m in session.messages] == ["user"]


async def test_interrupt_while_tool_runs_leaves_placeholder(session: Session) -> None:
    started = asyncio.Event()

    @tool(timeout_s=60)
    async def wait_forever() -> str:
        """Never finishes."""
        started.set()
        await asyncio.Event().wait()
        return "unreachable"

    model = ScriptedModel([reply("", call("wait_forever"), call("echo", {"text": "fast"}))])
    agent = make_agent(model, [wait_forever, echo])

    async def interrupt_when_started() -> None:
        await started.wait()
        session.interrupt()

    task = asyncio.ensure_future(interrupt_when_started())
    events = await asyncio.wait_for(collect(agent, session, "go"), timeout=10)
    await task
    assert final(events).stop_reason == "interrupted"
    by_name = {m.name: m.content for m in session.messages if m.role == "tool"}
    assert by_name["wait_forever"] == INTERRUPTED_TOOL_RESULT
    assert by_name["echo"] in ("fast", INTERRUPTED_TOOL_RESULT)
    assert trajectory_problems(session.messages) == []


async def test_cancelling_the_run_task_keeps_a_valid_trajectory(session: Session) -> None:
    started = asyncio.Event()

    @tool(timeout_s=60)
    async def hang() -> str:
        """Hang."""
        started.set()
        await asyncio.Event().wait()
        return "unreachable"

    model = ScriptedModel([reply("", call("hang"))])
    agent = make_agent(model, [hang])
    task = asyncio.ensure_future(collect(agent, session, "go"))
    await asyncio.wait_for(started.wait(), timeout=10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert tool_messages(session) == [INTERRUPTED_TOOL_RESULT]
    assert trajectory_problems(session.messages) == []


async def test_closing_the_event_iterator_mid_tool_keeps_a_valid_trajectory(session: Session) -> None:
    @tool(timeout_s=60)
    async def hang() -> str:
        """Hang."""
        await asyncio.Event().wait()
        return "unreachable"

    model = ScriptedModel([reply("", call("hang"))])
    run = make_agent(model, [hang]).run(session, "go")
    async for event in run:
        if event.type == "tool_started":
            break
    await run.aclose()
    assert tool_messages(session) == [INTERRUPTED_TOOL_RESULT]
    assert trajectory_problems(session.messages) == []


async def test_sessions_persist_and_resume(store: SessionStore, session: Session) -> None:
    model = ScriptedModel([reply("", call("add", {"a": 1, "b": 2})), reply("3"), reply("again 3")])
    agent = make_agent(model)
    await collect(agent, session, "add")
    before = [m.serialized() for m in session.messages]
    await session.aclose()  # one writer per session: the first run gives it back
    reopened = SessionStore(store.workspace)
    try:
        resumed = reopened.resume(session.id)
        assert [m.serialized() for m in resumed.messages] == before
        events = await collect(agent, resumed, "once more")
        assert final(events).text == "again 3"
        # the resumed request carries the whole history before the new user message
        last = model.requests[-1]
        assert [m.serialized() for m in last.messages[: len(before)]] == before
        assert len(reopened.trajectories.load_requests(session.id)) == 3
    finally:
        await resumed.aclose()
        reopened.close()


async def test_reply_without_tools_streams_text_deltas(session: Session) -> None:
    model = ScriptedModel([reply("hello world")], chunk=3)
    events = await collect(make_agent(model), session, "hi")
    deltas = [e.delta.text for e in events if e.type == "model_delta" and e.delta.type == "text"]
    assert "".join(deltas) == "hello world" and len(deltas) > 1


async def test_a_run_says_what_it_is_doing_before_each_model_call_and_tool_phase(session: Session) -> None:
    """Issue 24 §2: ``Activity`` events are what a status line shows (and the server streams)."""
    model = ScriptedModel([reply("", call("add", {"a": 1, "b": 2}), call("echo", {"text": "x"})), reply("3 and x")])
    events = await collect(make_agent(model), session, "go")
    activities = [(e.kind, e.detail) for e in events if isinstance(e, Activity)]
    assert activities == [
        ("waiting", ""),
        ("generating", "add"),
        ("generating", "echo"),
        ("tool", "add, echo"),
        ("waiting", ""),
    ]
    types = [e.type for e in events]
    assert types.index("activity") < types.index("model_delta")  # said before anything of the reply
    tool_activity = next(i for i, e in enumerate(events) if isinstance(e, Activity) and e.kind == "tool")
    assert tool_activity < types.index("tool_started")


class _Recall(Plugin):
    """A memory-stage plugin whose turn-start recall waits for ``release`` (or not at all)."""

    stage = "memory"

    def __init__(self, release: asyncio.Event | None) -> None:
        self.release = release

    async def at_safe_point(self, ctx: RunContext, at: Any) -> tuple[()]:
        if at == "turn_start" and self.release is not None:
            await self.release.wait()
        return ()


async def test_a_slow_memory_recall_shows_waiting_for_memory_and_a_quick_one_shows_nothing(session: Session) -> None:
    release = asyncio.Event()
    model = ScriptedModel([reply("remembered"), reply("quick")])
    events: list[AgentEvent] = []
    async for e in make_agent(model, plugins=[_Recall(release)]).run(session, "what do you know about me?"):
        events.append(e)
        if isinstance(e, Activity) and e.kind == "memory":
            release.set()  # the recall can only end after the user was told it is waiting
    assert [e.kind for e in events if isinstance(e, Activity)][:2] == ["memory", "waiting"]
    quick = await collect(make_agent(model, plugins=[_Recall(None)]), session, "again")
    assert [e.kind for e in quick if isinstance(e, Activity)] == ["waiting"]
