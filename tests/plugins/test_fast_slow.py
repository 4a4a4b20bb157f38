"""Fast/slow thinking (Plan 2) on scripted models: the foreground answers first, advice arrives at a safe point."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kairos.agent import Agent, ModelDeltaEvent
from kairos.agent.events import AgentEvent
from kairos.context.inbox import TaskCompleted
from kairos.context.session import Session, SessionStore
from kairos.errors import ConfigError
from kairos.models.types import STATUS, ModelRequest, ModelResponse, TextDelta
from kairos.plugins.fast_slow import (
    ADVICE_PROMPT,
    NO_UPDATE,
    Said,
    SlowThinking,
    converse,
    fill_then_answer,
    is_no_update,
    single,
)
from kairos.runtime import Event, Runtime
from kairos.testing import ScriptedModel, call, reply, trajectory_problems
from kairos.testing.runtime import gather_answers
from kairos.tools.function import tool

GATE: asyncio.Event | None = None
ENTERED: asyncio.Event | None = None
CANCELLED: list[str] = []


@pytest.fixture(autouse=True)
def _gates() -> None:
    global GATE, ENTERED
    GATE, ENTERED = asyncio.Event(), asyncio.Event()
    CANCELLED.clear()


@tool
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression."""
    return "TOOL-OUTPUT 391" if expression == "17*23" else "unknown"


@tool
async def slow_lookup(key: str) -> str:
    """Look a fact up (blocks until the test opens the gate)."""
    assert GATE is not None and ENTERED is not None
    ENTERED.set()
    try:
        await GATE.wait()
    except asyncio.CancelledError:
        CANCELLED.append(key)
        raise
    return f"{key} = 391"


def background(model: ScriptedModel, tools: list[Any] | None = None, **kw: Any) -> Agent:
    return Agent(model, tools=tools if tools is not None else [calculate, slow_lookup], system="You check facts.", **kw)


def foreground(model: ScriptedModel, bg: Agent, **kw: Any) -> Agent:
    return Agent(model, system="You are a quick voice assistant.", plugins=[SlowThinking(bg, **kw)])


def status_of(request: ModelRequest) -> str:
    last = request.messages[-1]
    assert last.origin == STATUS
    return last.content


def advised(text: str) -> Any:
    """A foreground step that answers with ``text`` once the status carries advice (checked)."""

    def step(request: ModelRequest) -> ModelResponse:
        assert "Advice" in status_of(request), status_of(request)
        return reply(text)

    return step


async def collect(items: Any) -> tuple[list[AgentEvent], list[Said]]:
    events: list[AgentEvent] = []
    said: list[Said] = []
    async for item in items:
        (said if isinstance(item, Said) else events).append(item)
    return events, said


async def test_the_foreground_answers_before_the_background_finishes_then_follows_up_with_the_advice(
    session: Session,
) -> None:
    bg_model = ScriptedModel([reply("", call("slow_lookup", {"key": "17*23"})), reply("17 * 23 = 391.")])
    fg_model = ScriptedModel([reply("Let me check that."), advised("Checked: 17 times 23 is 391.")])
    fg = foreground(fg_model, background(bg_model))
    plugin = fg.pipeline.service(SlowThinking)
    assert plugin is not None
    gen = converse(fg, session, "What is 17 times 23?")
    said: list[Said] = []
    async for item in gen:
        if isinstance(item, Said):
            said.append(item)
            if len(said) == 1:  # the first answer is out while the background still works
                assert item.text == "Let me check that." and item.kind == "answer"
                assert ENTERED is not None and GATE is not None
                await ENTERED.wait()
                assert plugin.pending(session)
                GATE.set()
    assert [(s.kind, s.text) for s in said] == [
        ("answer", "Let me check that."),
        ("follow_up", "Checked: 17 times 23 is 391."),
    ]
    assert not plugin.pending(session) and len(plugin.jobs(session)) == 1  # the follow-up started no new check
    assert plugin.jobs(session)[0].advice == "17 * 23 = 391."
    assert trajectory_problems(session.messages) == []


async def test_advice_is_in_the_status_after_the_cache_boundary_never_in_the_history(session: Session) -> None:
    bg_model = ScriptedModel([reply("", call("calculate", {"expression": "17*23"})), reply("It is 391.")])
    fg_model = ScriptedModel([reply("About 400, let me check."), advised("Correction: I said about 400; it is 391.")])
    fg = foreground(fg_model, background(bg_model))
    _, said = await collect(converse(fg, session, "What is 17 times 23?"))
    assert said[-1].text == "Correction: I said about 400; it is 391."
    first, follow = fg_model.requests
    # the prompt part is in the deployment part of the system prompt (after the cache boundary)
    assert ADVICE_PROMPT in follow.system_deployment and ADVICE_PROMPT not in follow.system_static
    # the advice is the trailing status, after the stable prefix; the prefix of the first request is kept
    assert follow.stable_prefix_len == len(follow.messages) - 1
    assert follow.messages[: first.stable_prefix_len] == first.messages[: first.stable_prefix_len]
    assert "«It is 391.»" in status_of(follow) and "still running" in status_of(first)
    # the history holds the wake-up, not the advice, and never the background's raw tool output
    stored = [m.content for m in session.messages]
    assert not any("It is 391." in c for c in stored)
    assert any('source="background check"' in c for c in stored)
    assert not any("TOOL-OUTPUT" in m.content for r in fg_model.requests for m in r.messages)
    assert "used calculate" not in status_of(follow)  # names only while running; the advice once done


async def test_the_background_model_is_swappable_without_touching_the_foreground(store: SessionStore) -> None:
    requests: list[ModelRequest] = []
    for bg in (
        background(ScriptedModel([reply("", call("calculate", {"expression": "17*23"})), reply("391")], name="a")),
        background(ScriptedModel([reply("Three hundred ninety-one.")], name="b-remote"), tools=[]),
    ):
        fg_model = ScriptedModel([reply("Checking."), advised("It is 391.")])
        session = store.new()
        _, said = await collect(converse(foreground(fg_model, bg), session, "What is 17 times 23?"))
        await session.aclose()
        assert [s.text for s in said] == ["Checking.", "It is 391."]
        requests.extend(fg_model.requests)
    a, b = requests[0], requests[2]
    assert (a.system_static, a.system_deployment, a.tools) == (b.system_static, b.system_deployment, b.tools)


async def test_a_failing_background_is_a_note_never_a_crash(session: Session) -> None:
    bg_model = ScriptedModel([RuntimeError("backend down")])

    def unchecked(request: ModelRequest) -> ModelResponse:
        assert "could not check" in status_of(request)
        return reply("Sorry, I could not check it; my guess stays about 400.")

    fg_model = ScriptedModel([reply("About 400, let me check."), unchecked])
    fg = foreground(fg_model, background(bg_model))
    events, said = await collect(converse(fg, session, "What is 17 times 23?"))
    assert [s.kind for s in said] == ["answer", "follow_up"]
    job = fg.pipeline.service(SlowThinking).jobs(session)[0]  # type: ignore[union-attr]
    assert job.advice is None and job.error is not None and "backend down" in job.error
    assert any('status="failed"' in m.content for m in session.messages)


async def test_a_hanging_background_times_out_and_the_foreground_says_so(session: Session) -> None:
    bg_model = ScriptedModel([reply("", call("slow_lookup", {"key": "x"}))])

    def unchecked(request: ModelRequest) -> ModelResponse:
        assert "no answer within" in status_of(request)
        return reply("I could not check it in time.")

    fg_model = ScriptedModel([reply("Let me check."), unchecked])
    fg = foreground(fg_model, background(bg_model), timeout_s=0.2)
    _, said = await collect(converse(fg, session, "What is x?"))
    assert [s.text for s in said] == ["Let me check.", "I could not check it in time."]
    assert CANCELLED == ["x"]  # the hung tool was cancelled, not left running


async def test_closing_the_conversation_cancels_the_background(session: Session) -> None:
    bg_model = ScriptedModel([reply("", call("slow_lookup", {"key": "q"})), reply("never")])
    fg_model = ScriptedModel([reply("Let me check.")])
    fg = foreground(fg_model, background(bg_model))
    gen = converse(fg, session, "What is q?")
    async for item in gen:
        if isinstance(item, Said):
            break
    assert ENTERED is not None
    await ENTERED.wait()
    await gen.aclose()  # the user hung up
    plugin = fg.pipeline.service(SlowThinking)
    assert plugin is not None
    await plugin.settled(session)
    job = plugin.jobs(session)[0]
    assert job.error == "cancelled" and CANCELLED == ["q"]
    assert not session.inbox.has_messages()  # a cancelled check wakes nobody


async def test_closing_the_session_cancels_the_background(store: SessionStore) -> None:
    session = store.new()
    bg_model = ScriptedModel([reply("", call("slow_lookup", {"key": "q"}))])
    fg = foreground(ScriptedModel([reply("Let me check.")]), background(bg_model))
    await collect(fg.run(session, "What is q?"))  # one turn, as the runtime's worker runs it
    assert ENTERED is not None
    await ENTERED.wait()
    await session.aclose()
    assert CANCELLED == ["q"]


async def test_advice_that_only_confirms_is_not_said(session: Session) -> None:
    bg_model = ScriptedModel([reply("391")])
    fg_model = ScriptedModel([reply("17 times 23 is 391."), advised(NO_UPDATE)])
    fg = foreground(fg_model, background(bg_model))
    events, said = await collect(converse(fg, session, "What is 17 times 23?"))
    assert [(s.text, s.silent) for s in said] == [("17 times 23 is 391.", False), (NO_UPDATE, True)]
    shown = "".join(e.delta.text for e in events if isinstance(e, ModelDeltaEvent) and isinstance(e.delta, TextDelta))
    assert shown == "17 times 23 is 391."
    assert is_no_update(" NO_UPDATE. ") and not is_no_update("NO_UPDATE is wrong")


async def test_a_resumed_session_does_not_check_its_old_questions_again(store: SessionStore) -> None:
    session = store.new()
    bg_model = ScriptedModel([reply("391")])
    await collect(
        converse(
            foreground(ScriptedModel([reply("Checking."), advised("391.")]), background(bg_model)), session, "17*23?"
        )
    )
    sid = session.id
    await session.aclose()
    resumed = store.resume(sid)
    resumed.post(TaskCompleted("timer-1", "a reminder", source="timer"))
    fg = foreground(ScriptedModel([reply("Noted.")]), background(bg_model))
    await collect(fg.run(resumed))  # a run with no new question
    assert fg.pipeline.service(SlowThinking).jobs(resumed) == [] and len(bg_model.requests) == 1  # type: ignore[union-attr]
    await resumed.aclose()


async def test_route_decides_which_questions_get_a_check(session: Session) -> None:
    bg_model = ScriptedModel([])
    fg = foreground(ScriptedModel([reply("Hi!")]), background(bg_model), route=lambda q: "?" in q)
    _, said = await collect(converse(fg, session, "Hello"))
    assert [s.text for s in said] == ["Hi!"] and bg_model.requests == []


async def test_converse_needs_the_plugin(session: Session) -> None:
    with pytest.raises(ConfigError):
        await collect(converse(Agent(ScriptedModel([])), session, "hi"))
    with pytest.raises(ConfigError):
        SlowThinking(background(ScriptedModel([])), timeout_s=0)


async def test_plan_1_says_the_fast_filler_then_the_slow_answer_verbatim(session: Session) -> None:
    fast = Agent(ScriptedModel([reply("About 400.")]))
    slow = background(ScriptedModel([reply("", call("calculate", {"expression": "17*23"})), reply("391")]))
    _, said = await collect(fill_then_answer(fast, slow, session, "What is 17 times 23?"))
    assert [(s.kind, s.text) for s in said] == [("answer", "About 400."), ("slow_answer", "391")]
    assert [m.content for m in session.messages if m.role == "assistant"] == ["About 400.", "391"]


async def test_the_single_model_baseline_answers_with_its_tools(session: Session) -> None:
    agent = background(ScriptedModel([reply("", call("calculate", {"expression": "17*23"})), reply("391")]))
    _, said = await collect(single(agent, session, "What is 17 times 23?"))
    assert [(s.kind, s.text) for s in said] == [("answer", "391")]


async def test_under_the_runtime_the_session_worker_runs_the_follow_up_turn(tmp_path: Path) -> None:
    """Text chat (``kairos serve``/``chat``): the wake-up lands in the inbox and the worker answers again."""
    bg_model = ScriptedModel([reply("", call("calculate", {"expression": "17*23"})), reply("It is 391.")])
    fg_model = ScriptedModel([reply("About 400, let me check."), advised("Correction: I said about 400; it is 391.")])
    async with Runtime(foreground(fg_model, background(bg_model)), SessionStore(tmp_path)) as rt:
        sid = rt.create_session("voice")
        listening = asyncio.create_task(gather_answers(rt, sid, lambda answers: len(answers) == 2, timeout_s=30))
        await asyncio.sleep(0)
        await rt.submit(Event("user.input", "What is 17 times 23?", {"type": "user"}, "test", session=sid))
        answers = await listening
    assert answers == ["About 400, let me check.", "Correction: I said about 400; it is 391."]
