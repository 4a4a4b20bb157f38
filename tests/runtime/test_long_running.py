"""Tools declared ``long_running``: under the runtime they return a task id at once and the result comes
as an ``async.result`` event; without the runtime's task manager they run inline."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.runtime import Event, Runtime
from kairos.runtime.integrations.tasks import TaskManager
from kairos.runtime.integrations.tasks import tools as task_tools
from kairos.testing import ScriptedModel, call, reply, trajectory_problems
from kairos.tools.base import Tool, ToolContext, ToolResult
from kairos.tools.function import tool

GATE: asyncio.Event | None = None
RUNS: list[str] = []


@tool(long_running=True, side_effects=True)
async def build_report(quarter: str, ctx: ToolContext) -> str | ToolResult:
    """Build the quarterly report (takes minutes).

    Args:
        quarter: e.g. "Q3".
    """
    RUNS.append(quarter)
    if GATE is not None:
        await GATE.wait()
    if quarter == "Q0":
        return ToolResult("no such quarter", is_error=True)
    return f"report for {quarter}: revenue up 12%"


async def _until(check, timeout_s: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        while not check():  # noqa: ASYNC110 (polls the model's requests)
            await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def _running(
    model: ScriptedModel, tools: list[Tool], root: Path, background_after_s: float | None = None
) -> AsyncIterator[tuple[Runtime, TaskManager, str]]:
    """A runtime with a task manager, ready, and a new session in it."""
    manager = TaskManager(poll_s=0.05)
    agent = Agent(model, tools=tools)
    async with Runtime(agent, SessionStore(root), components=[manager], background_after_s=background_after_s) as rt:
        await manager.ready()
        yield rt, manager, rt.create_session()


def _texts(rt: Runtime, sid: str) -> list[str]:
    return [m.content for m in rt.store.trajectories.load_messages(sid)]


async def test_it_answers_at_once_with_a_task_id_and_the_result_comes_as_an_event(tmp_path: Path) -> None:
    global GATE
    GATE = asyncio.Event()
    RUNS.clear()
    model = ScriptedModel(
        [reply("", call("build_report", {"quarter": "Q3"})), reply("building it"), reply("the report is ready")]
    )
    async with _running(model, [build_report, *task_tools()], tmp_path) as (rt, manager, sid):
        await rt.submit(Event("user.input", "make the Q3 report", session=sid))
        await _until(lambda: len(model.requests) == 2)
        await rt.wait_idle(sid)
        [task] = manager.tasks_of(sid)
        assert task.status == "running" and RUNS == ["Q3"]  # the turn ended while the tool still works
        started = _texts(rt, sid)[2]
        assert f"Started in the background as task {task.id}" in started
        GATE.set()
        await _until(lambda: len(model.requests) == 3)
        await rt.wait_idle(sid)
        texts = _texts(rt, sid)
        problems = trajectory_problems(rt.store.trajectories.load_messages(sid))
        info = manager.get(task.id)
    assert info is not None and info.status == "done"
    assert "report for Q3: revenue up 12%" in texts[4] and task.id in texts[4]
    assert texts[-1] == "the report is ready" and problems == []
    assert RUNS == ["Q3"]  # ran once


async def test_a_failure_in_the_background_reaches_the_model_as_an_error(tmp_path: Path) -> None:
    global GATE
    GATE = None
    model = ScriptedModel([reply("", call("build_report", {"quarter": "Q0"})), reply("it failed"), reply("sorry")])
    async with _running(model, [build_report], tmp_path) as (rt, manager, sid):
        await rt.submit(Event("user.input", "make the Q0 report", session=sid))
        await _until(lambda: len(manager.tasks_of(sid)) == 1 and manager.tasks_of(sid)[0].status != "running")
        await _until(lambda: any("<task_result" in t for t in _texts(rt, sid)))
        await rt.wait_idle(sid)
        [task] = manager.tasks_of(sid)
        result = next(t for t in _texts(rt, sid) if "<task_result" in t)
    assert task.status == "failed"
    assert 'status="failed"' in result and "no such quarter" in result


async def test_cancel_task_stops_a_long_running_call(tmp_path: Path) -> None:
    global GATE
    GATE = asyncio.Event()  # never set: only a cancel ends it
    model = ScriptedModel([reply("", call("build_report", {"quarter": "Q4"})), reply("started")])
    async with _running(model, [build_report, *task_tools()], tmp_path) as (rt, manager, sid):
        await rt.submit(Event("user.input", "make the Q4 report", session=sid))
        await _until(lambda: len(model.requests) == 2)
        await rt.wait_idle(sid)
        [task] = manager.tasks_of(sid)
        await manager.cancel(task.id)
        info = manager.get(task.id)
    assert info is not None and info.status == "cancelled"


async def test_without_the_task_manager_it_runs_inline(tmp_path: Path) -> None:
    global GATE
    GATE = None
    model = ScriptedModel([reply("", call("build_report", {"quarter": "Q2"})), reply("done")])
    async with Runtime(Agent(model, tools=[build_report]), SessionStore(tmp_path)) as rt:
        sid = rt.create_session()
        await rt.submit(Event("user.input", "make the Q2 report", session=sid))
        await _until(lambda: len(model.requests) == 2)
        await rt.wait_idle(sid)
        texts = _texts(rt, sid)
    assert "report for Q2: revenue up 12%" in texts[2] and "background" not in texts[2]


@tool(timeout_s=60)
async def slow_lookup(name: str) -> str:
    """Look a name up (sometimes slow).

    Args:
        name: who.
    """
    await asyncio.sleep(0.05)  # never instant: a call handed over at 0 s would show
    if GATE is not None:
        await GATE.wait()
    return f"{name} is in room 4"


async def test_a_call_still_running_after_background_after_s_goes_on_as_a_task(tmp_path: Path) -> None:
    global GATE
    GATE = asyncio.Event()
    model = ScriptedModel([reply("", call("slow_lookup", {"name": "Ada"})), reply("looking"), reply("Ada: room 4")])
    async with _running(model, [slow_lookup, *task_tools()], tmp_path, 0.3) as (rt, manager, sid):
        await rt.submit(Event("user.input", "where is Ada?", session=sid))
        await _until(lambda: len(model.requests) == 2)  # answered at 0.3 s: the model may go on
        [task] = manager.tasks_of(sid)
        handed = _texts(rt, sid)[2]
        GATE.set()
        await _until(lambda: len(model.requests) == 3)
        await rt.wait_idle(sid)
        texts = _texts(rt, sid)
        problems = trajectory_problems(rt.store.trajectories.load_messages(sid))
    assert f"Still running after 0.3 s, so it goes on in the background as task {task.id}" in handed
    assert any("<task_result" in t and "Ada is in room 4" in t for t in texts) and problems == []


async def test_a_quick_call_is_not_handed_over_and_none_or_0_means_inline(tmp_path: Path) -> None:
    global GATE
    GATE = None
    for after_s in (5.0, None, 0.0):  # 0, like None: never handed over
        model = ScriptedModel([reply("", call("slow_lookup", {"name": "Bo"})), reply("done")])
        async with _running(model, [slow_lookup], tmp_path / str(after_s), after_s) as (rt, manager, sid):
            await rt.submit(Event("user.input", "where is Bo?", session=sid))
            await _until(lambda m=model: len(m.requests) == 2)
            await rt.wait_idle(sid)
            assert _texts(rt, sid)[2].startswith("Bo is in room 4") and not manager.tasks_of(sid)


async def test_cancel_task_stops_a_bash_command_that_was_handed_over(tmp_path: Path) -> None:
    from kairos.tools.builtins import bash

    marker = tmp_path / "ws" / "finished"
    (tmp_path / "ws").mkdir()
    model = ScriptedModel([reply("", call("bash", {"command": "sleep 2 && touch finished"})), reply("it runs")])
    async with _running(model, [bash, *task_tools()], tmp_path / "ws", 0.5) as (rt, manager, sid):
        await rt.submit(Event("user.input", "run it", session=sid))
        await _until(lambda: len(model.requests) == 2)
        await rt.wait_idle(sid)
        [task] = manager.tasks_of(sid)
        assert task.status == "running"
        await manager.cancel(task.id)
        info = manager.get(task.id)
        await asyncio.sleep(2.5)  # the runtime and its shell stay up: only the cancel can stop the command
        assert not marker.exists()  # stopped with the task (it would have touched the file at 2 s)
    assert info is not None and info.status == "cancelled"
