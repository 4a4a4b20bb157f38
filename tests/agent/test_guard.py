"""The loop guard: the same call with the same result, again and again, is a loop; progress is not."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from kairos.agent import Agent
from kairos.agent.events import AgentEvent, FinalAnswer
from kairos.agent.guard import STOP_AT, WARN_AT, LoopGuard, canonical_arguments
from kairos.context.builder import NoStatus
from kairos.context.session import Session
from kairos.models.types import AllBut, SystemPrompt
from kairos.plugins.status_bar import StatusBar, StatusBarConfig
from kairos.testing import ScriptedModel, call, reply, trajectory_problems
from kairos.tools.base import Tool
from kairos.tools.function import tool


@tool
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


def make_agent(model: ScriptedModel, tools: list[Tool], **kw: Any) -> Agent:
    return Agent(model, tools=tools, system=SystemPrompt("You are a test agent."), status=NoStatus(), **kw)


async def collect(agent: Agent, session: Session, text: str) -> list[AgentEvent]:
    return [e async for e in agent.run(session, text)]


def final(events: list[AgentEvent]) -> FinalAnswer:
    finals = [e for e in events if isinstance(e, FinalAnswer)]
    assert len(finals) == 1
    return finals[0]


def tool_messages(session: Session) -> list[str]:
    return [m.content for m in session.messages if m.role == "tool"]


# ---- the guard itself ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ('{"a": 1, "b": [1, 2]}', '{"b":[1,2],"a":1}'),  # key order and spacing do not matter
        ('{"path": "."}', ' {\n  "path": "."\n} '),
        ("not json", "  not json\n"),  # not JSON: compared as written, stripped
    ],
)
def test_arguments_are_compared_canonically(a: str, b: str) -> None:
    assert canonical_arguments(a) == canonical_arguments(b)


def test_different_arguments_stay_different() -> None:
    assert canonical_arguments('{"a": 1}') != canonical_arguments('{"a": "1"}')
    assert canonical_arguments('{"a": 1}') != canonical_arguments('{"a": 1, "b": null}')


def test_the_same_call_in_another_spelling_counts_as_the_same() -> None:
    guard = LoopGuard()
    assert guard.observe(call("ls", '{"path": ".", "all": true}'), "a b") == 1
    assert guard.observe(call("ls", '{"all":true,"path":"."}'), "a b") == 2


def test_it_warns_at_three_and_stops_at_four() -> None:
    assert (WARN_AT, STOP_AT) == (3, 4)
    guard = LoopGuard()
    counts = [guard.observe(call("ls", {"path": "."}), "same") for _ in range(4)]
    assert counts == [1, 2, 3, 4]
    assert [n >= guard.warn_at for n in counts] == [False, False, True, True]
    assert [n >= guard.stop_at for n in counts] == [False, False, False, True]
    c = call("ls", {"path": "."})
    assert "call #3 of 'ls'" in guard.warning(c, 3) and "same result" in guard.warning(c, 3)
    assert "'ls' was called 4 times" in guard.stop_message(c, 4) and "looping" in guard.stop_message(c, 4)


def test_different_results_are_not_a_loop() -> None:
    guard = LoopGuard()
    assert [guard.observe(call("tick"), str(i)) for i in range(5)] == [1] * 5


def test_other_tools_or_arguments_are_counted_apart() -> None:
    guard = LoopGuard()
    guard.observe(call("read", {"path": "a"}), "x")
    assert guard.observe(call("read", {"path": "b"}), "x") == 1
    assert guard.observe(call("grep", {"path": "a"}), "x") == 1
    assert guard.observe(call("read", {"path": "a"}), "x") == 2


def test_thresholds_are_configurable() -> None:
    guard = LoopGuard(warn_at=2, stop_at=2)
    guard.observe(call("x"), "r")
    assert guard.observe(call("x"), "r") >= guard.stop_at


# ---- in the loop -----------------------------------------------------------------------------


async def test_loop_guard_warns_on_third_and_stops_on_fourth(session: Session) -> None:
    same = [reply("", call("echo", {"text": "same"})) for _ in range(5)]
    model = ScriptedModel(same)
    events = await collect(make_agent(model, [echo]), session, "loop")
    results = tool_messages(session)
    assert len(results) == 4
    assert "loop guard" not in results[1]
    assert "loop guard" in results[2] and "call #3" in results[2]
    end = final(events)
    assert end.stop_reason == "loop_guard" and "echo" in end.text
    assert len(model.script) == 1  # the fifth reply was never requested
    assert trajectory_problems(session.messages) == []


async def test_same_call_with_changing_results_is_not_a_loop(session: Session) -> None:
    counter = iter(range(100))

    @tool
    def tick() -> str:
        """Next number."""
        return str(next(counter))

    model = ScriptedModel([reply("", call("tick")) for _ in range(5)] + [reply("done")])
    events = await collect(make_agent(model, [tick]), session, "count")
    assert final(events).stop_reason == "answer"
    assert not any("loop guard" in r for r in tool_messages(session))


async def test_annotations_added_after_the_tool_do_not_hide_a_loop(session: Session) -> None:
    """Issue 8 §5.8: timestamps and "Tool call #k" notes made identical results look different."""
    model = ScriptedModel([reply("", call("echo", {"text": "same"})) for _ in range(6)])
    bar = StatusBar(StatusBarConfig(clock_start=datetime(2026, 1, 1), clock_step_s=5), environment={"OS": "Linux"})
    events = await collect(Agent(model, tools=[echo], plugins=[bar]), session, "loop")
    results = tool_messages(session)
    assert results[0] != results[1]  # the model sees annotated, differing results
    assert final(events).stop_reason == "loop_guard" and len(results) == STOP_AT


async def test_a_repeated_call_is_masked_for_the_next_reply_only(session: Session) -> None:
    """The second identical (call, result) rules that tool out of the next reply; the reply after is free again."""
    model = ScriptedModel(
        [
            reply("", call("echo", {"text": "same"})),
            reply("", call("echo", {"text": "same"})),
            reply("", call("echo", {"text": "other"})),  # a model that ignored the mask (scripted)
            reply("done"),
        ]
    )
    events = await collect(make_agent(model, [echo]), session, "go")
    assert final(events).text == "done"
    assert [r.tool_choice for r in model.requests] == ["auto", "auto", AllBut(("echo",)), "auto"]
    assert model.requests[2].allowed_tools() is None  # the only tool masked: the reply can only be text


def test_masks_escalate_from_one_reply_to_held_until_something_changes_the_world() -> None:
    guard = LoopGuard()
    read = call("read_email", {"uid": 2})
    guard.observe(read, "mail")
    assert guard.take_masked() == ()
    guard.observe(read, "mail")
    assert guard.take_masked() == ("read_email",)
    assert guard.take_masked() == ()  # the second repeat masks one reply only
    guard.observe(read, "mail")
    assert guard.take_masked() == guard.take_masked() == ("read_email",)  # the third holds it
    guard.observe(call("check_calendar"), "free")  # read-only: nothing changed
    assert guard.take_masked() == ("read_email",)
    guard.observe(call("move_email", {"uid": 2}), "moved", side_effects=True)
    assert guard.take_masked() == ()


def test_the_same_call_three_times_in_a_row_is_masked_once_even_when_its_result_ticks() -> None:
    guard = LoopGuard()
    clock = call("current_time", {"timezone": "UTC"})
    for second in range(2):
        guard.observe(clock, f"10:00:0{second}")
    assert guard.take_masked() == ()  # two in a row with new results: progress, maybe
    guard.observe(clock, "10:00:02")
    assert guard.take_masked() == ("current_time",)
    guard.observe(call("check_calendar"), "free")
    guard.observe(clock, "10:00:03")  # the run of repeats was broken
    assert guard.take_masked() == ()
