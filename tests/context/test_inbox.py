"""The inbox: the one way into a session. Persisted on post, drained at safe points, preemption by
event type, the three interrupt modes, thread-safe posting, and events that survive a restart."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from typing import Any

import pytest

from kairos.agent import Agent, FinalAnswer
from kairos.agent.events import AgentEvent, ToolCallStarted
from kairos.context.inbox import (
    ExternalContent,
    Inbox,
    Interrupt,
    TaskCompleted,
    TimerFired,
    UserInput,
    event_from_record,
    event_record,
)
from kairos.context.session import INTERRUPTED_TOOL_RESULT, Session, SessionStore
from kairos.models.types import ModelRequest, ModelResponse
from kairos.testing import ScriptedModel, call, reply, trajectory_problems
from kairos.tools.function import tool
from tests.support.models import ReadsItsPrompt


@tool(timeout_s=60)
async def wait_long() -> str:
    """Never finishes on its own."""
    await asyncio.Event().wait()
    return "unreachable"


@tool
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


async def collect(agent: Agent, session: Session, text: str | None = None) -> list[AgentEvent]:
    return [e async for e in agent.run(session, text)]


def final(events: list[AgentEvent]) -> FinalAnswer:
    (answer,) = [e for e in events if isinstance(e, FinalAnswer)]
    return answer


@pytest.mark.parametrize(
    "event",
    [
        UserInput("hi", urgent=True),
        ExternalContent("mail: a@b.test", "body"),
        TaskCompleted("sa-1", "done", source="subagent", ok=False, external=True),
        TimerFired("daily", "standup"),
        Interrupt("after_turn", "user left"),
    ],
)
def test_every_event_round_trips_through_its_record(event: Any) -> None:
    assert event_from_record(event.kind, event_record(event)) == event


def test_preemption_is_declared_by_the_event_type() -> None:
    assert Interrupt("immediate").preempts and not Interrupt("after_tool").preempts
    assert not Interrupt("after_turn").preempts
    assert UserInput("x", urgent=True).preempts and not UserInput("x").preempts
    assert ExternalContent("s", "x", urgent=True).preempts and not ExternalContent("s", "x").preempts
    assert not TaskCompleted("t", "x").preempts and not TimerFired("t").preempts


async def test_a_post_is_persisted_before_it_returns_and_survives_a_restart(store: SessionStore) -> None:
    session = store.new()
    session.post(ExternalContent("mail: bob@x.test", "Lunch at 12?"))
    await session.aclose()  # the process "dies" before any run drained it
    again = SessionStore(store.workspace)
    resumed = again.resume(session.id)
    try:
        (pending,) = resumed.inbox.pending()
        assert pending.event == ExternalContent("mail: bob@x.test", "Lunch at 12?")
        model = ScriptedModel([reply("noted")])
        await collect(Agent(model), resumed)
        first = model.requests[0].messages[0]
        assert first.origin is not None and first.origin.kind == "external"
        assert first.content.startswith('<external_content source="mail: bob@x.test">')  # data, not instructions
        assert resumed.inbox.pending() == []
    finally:
        await resumed.aclose()
        again.close()
    # consumed exactly once: a later resume finds nothing pending and the message stored once
    third = SessionStore(store.workspace)
    s3 = third.resume(session.id)
    assert s3.inbox.pending() == [] and sum("Lunch" in m.content for m in s3.messages) == 1
    await s3.aclose()
    third.close()


async def test_post_is_safe_from_another_thread_and_wakes_the_loop(session: Session) -> None:
    session.inbox.bind()
    waiter = asyncio.ensure_future(session.inbox.wait())
    thread = threading.Thread(target=session.post, args=(UserInput("from a thread"),))
    thread.start()
    await asyncio.wait_for(waiter, 10)
    thread.join(10)
    assert [p.event for p in session.inbox.pending()] == [UserInput("from a thread")]


async def test_an_event_posted_between_turns_is_taken_up_not_dropped(session: Session) -> None:
    model = ScriptedModel([reply("first"), reply("second")])
    agent = Agent(model)
    await collect(agent, session, "one")
    session.post(TimerFired("reminder", "check the build"))
    events = await collect(agent, session)  # no new input: the timer is the turn
    assert final(events).text == "second"
    assert model.requests[1].messages[-2].content == '<timer name="reminder">\ncheck the build\n</timer>'


async def test_an_immediate_interrupt_stops_a_tool_and_leaves_the_placeholder(session: Session) -> None:
    model = ScriptedModel([reply("", call("wait_long"))])
    agent = Agent(model, tools=[wait_long])
    events: list[AgentEvent] = []
    async for e in agent.run(session, "go"):
        events.append(e)
        if isinstance(e, ToolCallStarted):
            session.interrupt()
    assert final(events).stop_reason == "interrupted"
    assert [m.content for m in session.messages if m.role == "tool"] == [INTERRUPTED_TOOL_RESULT]
    assert session.inbox.pending() == []  # the interrupt was consumed
    assert trajectory_problems(session.messages) == []


async def test_an_after_tool_interrupt_lets_the_running_tool_finish(session: Session) -> None:
    model = ScriptedModel([reply("", call("echo", {"text": "kept"})), reply("never asked")])
    agent = Agent(model, tools=[echo])
    events: list[AgentEvent] = []
    async for e in agent.run(session, "go"):
        events.append(e)
        if isinstance(e, ToolCallStarted):
            session.interrupt("after_tool")
    assert final(events).stop_reason == "interrupted"
    assert [m.content for m in session.messages if m.role == "tool"] == ["kept"]
    assert len(model.requests) == 1  # stopped at the safe point before the next request


async def test_an_after_turn_interrupt_lets_the_answer_finish_but_takes_up_nothing_queued(session: Session) -> None:
    model = ScriptedModel([reply("", call("echo", {"text": "x"})), reply("answer"), reply("later")])
    agent = Agent(model, tools=[echo])
    events: list[AgentEvent] = []
    async for e in agent.run(session, "go"):
        events.append(e)
        if isinstance(e, ToolCallStarted):
            session.interrupt("after_turn")
            session.post(UserInput("queued meanwhile"))
    assert final(events).text == "answer" and final(events).stop_reason == "answer"
    assert [p.event for p in session.inbox.pending()] == [UserInput("queued meanwhile")]  # still queued
    assert final(await collect(agent, session)).text == "later"


async def test_a_message_arriving_before_the_final_answer_is_answered_in_the_same_run(session: Session) -> None:
    asked: list[str] = []

    def step(request: ModelRequest) -> ModelResponse:
        asked.append(request.messages[-2].content)
        return reply("noted the mail" if "mail" in asked[-1] else "first answer")

    model = ScriptedModel([reply("", call("echo", {"text": "x"})), step, step])
    agent = Agent(model, tools=[echo])
    events: list[AgentEvent] = []
    async for e in agent.run(session, "go"):
        events.append(e)
        if isinstance(e, ToolCallStarted):
            session.post(ExternalContent("mail: carol@x.test", "the mail"))
    # the mail was drained at the safe point after the tools; the model answered with it in view
    assert final(events).text == "first answer" or final(events).text == "noted the mail"
    assert any("the mail" in m.content for m in session.messages if m.role == "user")
    assert session.inbox.pending() == []
    assert trajectory_problems(session.messages) == []


async def test_urgent_input_preempts_the_stream_and_the_model_is_called_again(session: Session) -> None:
    model = ScriptedModel([reply("a long answer that streams slowly"), reply("ok, switching")], delay_s=0.02, chunk=4)
    agent = Agent(model)
    events: list[AgentEvent] = []
    async for e in agent.run(session, "talk"):
        events.append(e)
        if e.type == "model_delta" and len(events) == 2:
            session.post(UserInput("stop, do this instead", urgent=True))
    assert final(events).text == "ok, switching" and final(events).stop_reason == "answer"
    roles = [(m.role, m.content[:10]) for m in session.messages]
    # rule 4 (ch6 §3.3): the cut reply is not recorded; the model starts afresh with the event
    assert roles == [("user", "talk"), ("user", "stop, do t"), ("assistant", "ok, switch")]


async def test_an_interrupt_posted_before_new_input_is_superseded_by_it(session: Session) -> None:
    session.interrupt()  # e.g. a late Ctrl-C after the previous turn ended
    model = ScriptedModel([reply("fresh")])
    events = await collect(Agent(model), session, "new question")
    assert final(events).text == "fresh"


async def test_an_interrupt_posted_with_no_new_input_ends_the_next_run_at_once(session: Session) -> None:
    session.post(UserInput("queued"))
    session.interrupt()
    model = ScriptedModel([reply("never")])
    events = await collect(Agent(model), session)
    assert final(events).stop_reason == "interrupted" and model.requests == []


def test_an_inbox_without_a_loop_only_queues() -> None:
    class Store:
        def post_event(self, session_id: str, kind: str, record: dict[str, Any]) -> tuple[int, float]:
            return 1, 0.0

    inbox = Inbox(Store(), "s")
    assert inbox.post(UserInput("x")) == 1 and len(inbox) == 1
    taken = inbox.take()
    assert len(inbox) == 0
    inbox.put_back(taken)
    assert inbox.pending() == taken


async def test_an_interrupt_left_by_an_earlier_opening_is_dropped_when_the_session_is_opened(
    store: SessionStore,
) -> None:
    """Issue 24 §2: a chat that ended abnormally left interrupts in the inbox; the next process replayed them."""
    session = store.new()
    session.post(UserInput("first"))
    session.interrupt("after_turn", reason="the runtime is stopping")
    session.post(TimerFired("tea"))
    session.interrupt(reason="the runtime is stopping")
    await session.aclose()  # the process dies before a run took them up
    again = SessionStore(store.workspace)
    resumed = again.resume(session.id)
    try:
        # the interrupts targeted a run of the dead process; the other events wait, in order
        assert [p.event for p in resumed.inbox.pending()] == [UserInput("first"), TimerFired("tea")]
        model = ScriptedModel([reply("answered")])
        events = await collect(Agent(model), resumed)
        assert final(events).text == "answered" and len(model.requests) == 1
    finally:
        await resumed.aclose()
        again.close()
    assert store.trajectories.pending_events(session.id) == []  # consumed in the database too
    assert store.trajectories.sessions_with_pending() == []


async def test_consume_interrupts_keeps_the_other_events_in_order(session: Session) -> None:
    session.post(UserInput("a"))
    session.interrupt()
    session.post(UserInput("b"))
    assert session.consume_interrupts() == 1
    assert [p.event for p in session.inbox.pending()] == [UserInput("a"), UserInput("b")]
    assert [e.kind for e in session.store.pending_events(session.id)] == ["user_input", "user_input"]


async def test_input_typed_while_the_model_reads_its_prompt_joins_that_turn_at_once(session: Session) -> None:
    """Issue 24 §2: a line typed during a minutes-long prompt read joined only when the user pressed Ctrl-C."""
    model = ReadsItsPrompt([reply("Hi, in French: salut")])

    async def type_a_line() -> int:
        await model.reading.wait()
        return session.post(UserInput("and in French"))

    typing = asyncio.ensure_future(type_a_line())
    events = await asyncio.wait_for(collect(Agent(model), session, "say hi"), 10)
    seq = await typing
    assert final(events).text == "Hi, in French: salut" and final(events).stop_reason == "answer"
    # the request was made again with the line (nothing of the first reply existed to lose)
    assert len(model.requests) == 2 and "and in French" in [m.content for m in model.requests[1].messages]
    assert [(m.role, m.content) for m in session.messages] == [
        ("user", "say hi"),
        ("user", "and in French"),
        ("assistant", "Hi, in French: salut"),
    ]
    # stamped with the time it was typed (posted), not the time it was taken up
    with sqlite3.connect(session.store.path) as con:
        (posted_at,) = con.execute("SELECT posted_at FROM inbox WHERE seq = ?", (seq,)).fetchone()
        (created_at,) = con.execute("SELECT created_at FROM messages WHERE seq = 1").fetchone()
    assert created_at == posted_at
    assert trajectory_problems(session.messages) == []


async def test_input_typed_once_the_reply_streams_waits_for_the_safe_point(session: Session) -> None:
    model = ScriptedModel(
        [reply("a long answer that streams slowly"), reply("and the follow-up")], delay_s=0.01, chunk=4
    )
    events: list[AgentEvent] = []
    async for e in Agent(model).run(session, "talk"):
        events.append(e)
        if e.type == "model_delta" and sum(x.type == "model_delta" for x in events) == 1:
            session.post(UserInput("one more thing"))  # typed once the first token is out
    assert final(events).text == "and the follow-up"
    # the streamed reply was not cut: it is kept, and the line was answered after it in the same run
    assert [(m.role, m.content) for m in session.messages] == [
        ("user", "talk"),
        ("assistant", "a long answer that streams slowly"),
        ("user", "one more thing"),
        ("assistant", "and the follow-up"),
    ]


async def test_input_held_by_an_after_turn_interrupt_does_not_restart_the_request_again_and_again(
    session: Session,
) -> None:
    model = ReadsItsPrompt([reply("finishing up")])

    async def stop_and_type() -> None:
        await model.reading.wait()
        session.interrupt("after_turn", "the runtime is stopping")
        session.post(UserInput("queued for later"))

    typing = asyncio.ensure_future(stop_and_type())
    events = await asyncio.wait_for(collect(Agent(model), session, "work"), 10)
    await typing
    assert final(events).text == "finishing up" and len(model.requests) == 2
    assert [p.event for p in session.inbox.pending()] == [UserInput("queued for later")]  # for the next run


def test_the_inbox_sorts_a_drain_by_the_interrupt_rules(session: Session) -> None:
    inbox = session.inbox
    first = inbox.post(Interrupt("immediate", "stop that"))
    inbox.post(UserInput("new work"))
    # at a run's start, an interrupt posted before the newest input targeted the work before it
    drain = inbox.drain(at_start=True)
    assert drain.stop is None and drain.control == [first]
    assert [p.event for p in drain.deliver] == [UserInput("new work")]
    assert len(inbox) == 0 and len(drain.taken) == 2  # taken: put back by the caller if its append fails

    later = inbox.post(UserInput("more"))
    inbox.post(Interrupt("after_turn"))
    drain = inbox.drain()  # mid-run: an after_turn interrupt holds everything else for the next run
    assert drain.after_turn and drain.stop is None and not drain.deliver
    assert [p.seq for p in drain.held] == [later]
    inbox.put_back(drain.held)
    assert inbox.has_messages() and not inbox.interrupt_pending()
    inbox.post(Interrupt("immediate"))
    assert inbox.interrupt_pending()
    assert isinstance(inbox.drain(hold=True).stop, Interrupt)
