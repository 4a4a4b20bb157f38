"""The runtime core: workers per session, strategies, the five trajectory rules, durability, the bus."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from kairos.agent import Agent
from kairos.context.session import INTERRUPTED_TOOL_RESULT, SessionStore
from kairos.models.types import ModelRequest, ModelResponse
from kairos.runtime import Event, RuleRouter, Runtime, UrgencyRule
from kairos.testing import ScriptedModel, call, reply, trajectory_problems
from kairos.tools.function import tool


class _Started:
    """A flag tools set when they start (an asyncio.Event made in each test's own loop)."""

    event: asyncio.Event

    def clear(self) -> None:
        self.event = asyncio.Event()

    def set(self) -> None:
        self.event.set()

    async def wait(self) -> None:
        await self.event.wait()


STARTED = _Started()


@tool(timeout_s=60)
async def slow_search(query: str) -> str:
    """Takes a while."""
    STARTED.set()
    await asyncio.sleep(30)
    return f"results for {query}"


@tool
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


def _last(request: ModelRequest):  # type: ignore[no-untyped-def]
    """The last message before the trailing status."""
    return [m for m in request.messages if not m.content.startswith("<agent_status>")][-1]


def user(text: str, session: str | None = None, **kw: object) -> Event:
    return Event("user.input", text, {"type": "user"}, "test", session=session, **kw)  # type: ignore[arg-type]


async def test_an_event_wakes_the_worker_and_the_answer_is_published(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    model = ScriptedModel([reply("hello there")])
    async with Runtime(Agent(model), store) as rt:
        sid = rt.create_session("t")
        seen = []

        async def watch() -> None:
            async for ev in rt.bus.subscribe(sid, after=0):
                seen.append(ev.type)
                if ev.type == "run.ended":
                    return

        watcher = asyncio.create_task(watch())
        receipt = await rt.submit(user("hi", sid))
        assert receipt.strategy == "queue" and receipt.seq is not None
        await asyncio.wait_for(watcher, 10)
    assert seen[:3] == ["session.created", "event.accepted", "run.started"]
    assert "agent.final" in seen
    messages = SessionStore(tmp_path).resume(sid).messages
    assert [m.content for m in messages] == ["hi", "hello there"]


async def test_sessions_run_concurrently_each_in_order(tmp_path: Path) -> None:
    def answer(request: ModelRequest) -> ModelResponse:
        return reply("re: " + _last(request).content)

    model = ScriptedModel([answer] * 6, delay_s=0.05)
    async with Runtime(Agent(model), SessionStore(tmp_path)) as rt:
        a, b = rt.create_session("a"), rt.create_session("b")
        # submitted in the same tick: one group commit, both pending before the worker's first step
        await asyncio.gather(rt.submit(user("a1", a)), rt.submit(user("a2", a)), rt.submit(user("b1", b)))
        assert set(rt.active_sessions()) == {a, b}
        await rt.wait_idle(a)
        await rt.wait_idle(b)
        assert rt.store.trajectories.load_messages(b)[-1].content == "re: b1"
        contents = [m.content for m in rt.store.trajectories.load_messages(a)]
    # both arrived before the worker's first safe point: taken up together, in order
    assert contents[0].startswith("[Unprocessed Event 1/2] a1") and contents[1].startswith("[Unprocessed Event 2/2] a2")


async def test_urgent_input_during_a_tool_gets_the_placeholder_and_a_new_model_call(tmp_path: Path) -> None:
    """Rules 1-3 (ch6 §3.3): the call is recorded at once, the unfinished tool gets the placeholder,
    the urgent event is appended and the model called again."""
    STARTED.clear()
    model = ScriptedModel([reply("", call("slow_search", {"query": "contacts"})), reply("weather: sunny")])
    async with Runtime(Agent(model, tools=[slow_search]), SessionStore(tmp_path)) as rt:
        sid = rt.create_session()
        await rt.submit(user("write the email", sid))
        await asyncio.wait_for(STARTED.wait(), 5)
        messages = rt.store.trajectories.load_messages(sid)
        assert messages[-1].tool_calls and messages[-1].tool_calls[0].name == "slow_search"  # rule 1
        receipt = await rt.submit(
            Event("user.input", "wait, first check the weather", session=sid, strategy="interrupt")
        )
        assert receipt.strategy == "interrupt"
        await rt.wait_idle(sid)
        messages = rt.store.trajectories.load_messages(sid)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "user", "assistant"]
    assert messages[2].content == INTERRUPTED_TOOL_RESULT  # rule 3
    assert messages[3].content == "wait, first check the weather" and messages[4].content == "weather: sunny"
    assert trajectory_problems(messages) == []


async def test_routine_events_are_batched_with_markers_at_the_next_safe_point(tmp_path: Path) -> None:
    """Rule 5 and the ch6 §6.2 status markers: two events that arrive while a tool runs go in together."""
    release = asyncio.Event()

    @tool
    async def search(query: str) -> str:
        """Search."""
        STARTED.set()
        await release.wait()
        return "3 results"

    STARTED.clear()
    model = ScriptedModel([reply("", call("search", {"query": "sales"})), reply("done, in Japanese, as HTML")])
    async with Runtime(Agent(model, tools=[search]), SessionStore(tmp_path)) as rt:
        sid = rt.create_session()
        await rt.submit(user("analyse sales", sid))
        await asyncio.wait_for(STARTED.wait(), 5)
        await rt.submit(user("reply in Japanese", sid))
        await rt.submit(
            Event("email.received", "quarterly numbers attached", {"type": "email", "sender": "cfo@x"}, session=sid)
        )
        assert model.requests and len(model.requests) == 1  # nothing entered the running step
        release.set()
        await rt.wait_idle(sid)
    last = [m for m in model.requests[-1].messages if not m.content.startswith("<agent_status>")]
    assert last[-3].role == "tool" and last[-3].content == "3 results"  # the result first, then the batch
    assert last[-2].content.startswith("[Unprocessed Event 1/2] reply in Japanese")
    assert last[-1].content.startswith("[Unprocessed Event 2/2] <external_content")
    assert "2 unprocessed events, including 1 user message and 1 external message" in last[-1].content


async def test_an_interrupt_during_thinking_drops_the_cut_reply(tmp_path: Path) -> None:
    """Rule 4: the partial reply is not written to the trajectory; a fresh round starts."""
    model = ScriptedModel([reply("a long answer " * 20), reply("stopped; what now?")], delay_s=0.02, chunk=5)
    async with Runtime(Agent(model), SessionStore(tmp_path)) as rt:
        sid = rt.create_session()
        await rt.submit(user("write an essay", sid))
        async for ev in rt.bus.subscribe(sid, after=0):
            if ev.type == "agent.text":
                break
        await rt.submit(Event("user.interrupt", "stop, I said it wrong", session=sid))
        await rt.wait_idle(sid)
        messages = rt.store.trajectories.load_messages(sid)
    assert [(m.role, m.content) for m in messages] == [
        ("user", "write an essay"),
        ("user", "stop, I said it wrong"),
        ("assistant", "stopped; what now?"),
    ]


async def test_without_interrupts_the_trajectory_has_no_placeholders(tmp_path: Path) -> None:
    model = ScriptedModel([reply("", call("echo", {"text": "x"})), reply("fine")])
    async with Runtime(Agent(model, tools=[echo]), SessionStore(tmp_path)) as rt:
        sid = rt.create_session()
        await rt.submit(user("go", sid))
        await rt.wait_idle(sid)
        messages = rt.store.trajectories.load_messages(sid)
    assert all(m.content != INTERRUPTED_TOOL_RESULT for m in messages)
    assert not any("[Unprocessed Event" in m.content for m in messages)


async def test_a_parallel_question_is_answered_beside_the_task_and_logged_in_it(tmp_path: Path) -> None:
    STARTED.clear()
    release = asyncio.Event()

    @tool
    async def analyse() -> str:
        """Long analysis."""
        STARTED.set()
        await release.wait()
        return "analysis done"

    def respond(request: ModelRequest) -> ModelResponse:
        text = _last(request).content
        if "what time" in text and "[Executed in parallel" not in text:
            return reply("It is 10:00.")
        if _last(request).role == "tool" or "[Executed in parallel" in text:
            return reply("Report ready.")
        return reply("", call("analyse"))

    model = ScriptedModel([respond] * 4)
    router = RuleRouter([UrgencyRule("parallel", keywords=("what time",))])
    async with Runtime(Agent(model, tools=[analyse]), SessionStore(tmp_path), router=router) as rt:
        sid = rt.create_session()
        await rt.submit(user("analyse the data", sid))
        await asyncio.wait_for(STARTED.wait(), 5)
        answers = []

        async def watch() -> None:
            async for ev in rt.bus.subscribe(sid, after=0):
                if ev.type == "parallel.answer":
                    answers.append(ev.data["answer"])
                    return

        watcher = asyncio.create_task(watch())
        receipt = await rt.submit(user("what time is it?", sid))
        assert receipt.strategy == "parallel"
        await asyncio.wait_for(watcher, 5)
        assert answers == ["It is 10:00."]  # answered while the analysis still runs
        release.set()
        await rt.wait_idle(sid)
        messages = rt.store.trajectories.load_messages(sid)
    logged = [m.content for m in messages if "[Executed in parallel with the main task]" in m.content]
    assert len(logged) == 1 and "It is 10:00." in logged[0]
    assert messages[-1].content == "Report ready." and trajectory_problems(messages) == []


async def test_a_duplicate_event_id_is_acknowledged_once(tmp_path: Path) -> None:
    model = ScriptedModel([reply("ok")])
    async with Runtime(Agent(model), SessionStore(tmp_path)) as rt:
        sid = rt.create_session()
        first = await rt.submit(user("order 7", sid, id="evt-7"))
        again = await rt.submit(user("order 7", sid, id="evt-7"))
        await rt.wait_idle(sid)
    assert not first.duplicate and again.duplicate and again.seq is None
    assert len(model.requests) == 1


async def test_pending_events_are_dispatched_after_a_restart(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    sid = store.trajectories.create_session("t")
    store.trajectories.post_event(sid, "user_input", {"text": "left over", "urgent": False})
    model = ScriptedModel([reply("picked up")])
    async with Runtime(Agent(model), store) as rt:
        await asyncio.sleep(0)
        await rt.wait_idle(sid)
        messages = rt.store.trajectories.load_messages(sid)
    assert [m.content for m in messages] == ["left over", "picked up"]


async def test_an_idle_worker_closes_and_the_next_event_reopens_the_session(tmp_path: Path) -> None:
    model = ScriptedModel([reply("one"), reply("two")])
    async with Runtime(Agent(model), SessionStore(tmp_path), idle_close_s=0.05) as rt:
        sid = rt.create_session()
        await rt.submit(user("1", sid))
        await rt.wait_idle(sid)
        for _ in range(100):
            if not rt.active_sessions():
                break
            await asyncio.sleep(0.02)
        assert rt.active_sessions() == []
        await rt.submit(user("2", sid))
        await rt.wait_idle(sid)
        assert [m.content for m in rt.store.trajectories.load_messages(sid)] == ["1", "one", "2", "two"]


async def test_a_resumed_subscriber_misses_nothing(tmp_path: Path) -> None:
    model = ScriptedModel([reply("a"), reply("b")])
    async with Runtime(Agent(model), SessionStore(tmp_path)) as rt:
        sid = rt.create_session()
        await rt.submit(user("1", sid))
        await rt.wait_idle(sid)
        first = [ev async for ev in _take(rt, sid, 0, "run.ended")]
        cut = first[len(first) // 2].cursor
        await rt.submit(user("2", sid))
        await rt.wait_idle(sid)
        resumed = [ev async for ev in _take(rt, sid, cut, "run.ended", skip=1)]
    cursors = [e.cursor for e in resumed]
    assert cursors == sorted(cursors) and cursors[0] == first[len(first) // 2 + 1].cursor
    assert [e.data.get("text") for e in resumed if e.type == "agent.final"] == ["a", "b"]


async def _take(rt: Runtime, sid: str, after: int, until: str, skip: int = 0):  # type: ignore[no-untyped-def]
    async for ev in rt.bus.subscribe(sid, after=after):
        yield ev
        if ev.type == until:
            if skip == 0:
                return
            skip -= 1


async def test_a_stale_interrupt_does_not_wake_a_session_after_a_restart(tmp_path: Path) -> None:
    """Issue 24 §2: interrupts a killed process left are not replayed ("Interrupted before the turn started")."""
    store = SessionStore(tmp_path)
    sid = store.trajectories.create_session("t")
    store.trajectories.post_event(sid, "interrupt", {"mode": "after_turn", "reason": "the runtime is stopping"})
    store.trajectories.post_event(sid, "interrupt", {"mode": "immediate", "reason": "the runtime is stopping"})
    model = ScriptedModel([reply("hello again")])
    async with Runtime(Agent(model), store) as rt:
        assert rt.recover() == []  # nothing to resume: the interrupts belonged to the dead process's run
        await rt.submit(user("hi", sid))
        await rt.wait_idle(sid)
        finals = [ev.data async for ev in _take(rt, sid, 0, "run.ended") if ev.type == "agent.final"]
    assert finals == [{"text": "hello again", "stop_reason": "answer"}]
    assert store.trajectories.pending_events(sid) == []


async def test_an_interrupt_that_comes_too_late_for_its_run_does_not_end_the_next_one(tmp_path: Path) -> None:
    """Ctrl-C just as the answer ended: the interrupt is dropped with the run, not replayed as a new run."""
    model = ScriptedModel([reply("done"), reply("the timer's run")])
    async with Runtime(Agent(model), SessionStore(tmp_path)) as rt:
        sid = rt.create_session()
        rt.answer_listeners.append(lambda session, answer: rt.interrupt(session, "Ctrl-C"))  # still running
        await rt.submit(user("go", sid))
        await rt.wait_idle(sid)
        rt.answer_listeners.clear()
        await rt.submit(Event("timer.trigger", "tea", {"type": "timer", "name": "tea"}, session=sid))
        await rt.wait_idle(sid)
        finals = [ev.data async for ev in _take(rt, sid, 0, "run.ended", skip=1) if ev.type == "agent.final"]
    assert [f["text"] for f in finals] == ["done", "the timer's run"]
    assert len(model.requests) == 2


async def test_busy_is_seen_by_another_process_on_the_records_and_a_dead_workers_stops_counting(
    tmp_path: Path,
) -> None:
    """The ``active`` row's heartbeat is what a front end without the session sees (records on PostgreSQL)."""
    STARTED.clear()
    model = ScriptedModel([reply("", call("slow_search", {"query": "x"})), reply("done")])
    async with Runtime(Agent(model, tools=[slow_search]), SessionStore(tmp_path)) as rt:
        sid = rt.create_session()
        await rt.submit(user("search", sid))
        await STARTED.wait()
        elsewhere = Runtime(Agent(ScriptedModel([])), SessionStore(tmp_path))  # same records, no workers
        assert elsewhere.session_states() == ({sid}, {sid})
        rt.interrupt(sid, "stop")
        await rt.wait_idle(sid)
        assert elsewhere.session_states() == (set(), set())
        # a worker killed mid-turn leaves its heartbeat: stale after BUSY_STALE_S, no longer busy
        rt.db.write("UPDATE active SET running = ? WHERE session = ?", (time.time() - 20, sid))
        assert elsewhere.session_states()[1] == {sid}
        rt.db.write("UPDATE active SET running = ? WHERE session = ?", (time.time() - 3600, sid))
        assert elsewhere.session_states()[1] == set()
        elsewhere.db.close()
