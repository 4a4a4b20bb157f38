"""Exp 6-2 (book ch6): async tools, batching, interrupts, parallel tasks, with real shell scripts.

The model is scripted: each step is a function of the request, deciding as a model would from what
the trajectory shows (tool results, task result events, user messages).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from kairos.agent import Agent
from kairos.context.session import INTERRUPTED_TOOL_RESULT, SessionStore
from kairos.models.types import Message, ModelRequest, ModelResponse
from kairos.runtime import Event, Runtime
from kairos.runtime.integrations._tasks_proc import alive
from kairos.runtime.integrations.tasks import TaskManager, tools
from kairos.testing import ScriptedModel, call, reply, trajectory_problems
from kairos.testing.runtime import gather_answers

STARTED = re.compile(r"Started task (t-[0-9a-f]+) \(([^)]*)\)")


def _visible(request: ModelRequest) -> list[Message]:
    return [m for m in request.messages if not m.content.startswith("<agent_status>")]


def _started(request: ModelRequest) -> dict[str, str]:
    """Title → task id, from the start_command results so far."""
    found: dict[str, str] = {}
    for m in _visible(request):
        if m.role == "tool":
            for tid, title in STARTED.findall(m.content):
                found[title] = tid
    return found


def user(text: str, sid: str, kind: str = "user.input") -> Event:
    return Event(kind, text, {"type": "user"}, "test", session=sid)


def _calls(rt: Runtime, sid: str, name: str) -> bool:
    """Whether the model called ``name`` (recorded at once: rule 1)."""
    return any(c.name == name for m in rt.store.trajectories.load_messages(sid) for c in m.tool_calls)


async def _until(check, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        while not check():  # noqa: ASYNC110 (polls state in the database and /proc)
            await asyncio.sleep(0.05)


async def test_1_a_long_command_runs_while_the_time_question_is_answered(tmp_path: Path) -> None:
    def respond(request: ModelRequest) -> ModelResponse:
        last = _visible(request)[-1]
        if last.content == "analyse the logs":
            return reply("", call("start_command", {"command": "sleep 4; echo 'analysis: 3 anomalies'", "title": "a"}))
        if last.role == "tool":
            return reply("The analysis is running; I will tell you when it is done.")
        if "what time" in last.content:
            return reply("It is 10:00.")
        if "<task_result" in last.content:
            found = re.search(r"^analysis: .*$", last.content, re.M)
            return reply(f"Analysis finished: {found.group(0) if found else '?'}")
        return reply("?")

    manager = TaskManager(poll_s=0.05)
    model = ScriptedModel([respond] * 5)
    async with Runtime(Agent(model, tools=tools()), SessionStore(tmp_path), components=[manager]) as rt:
        await manager.ready()
        sid = rt.create_session()
        answers = asyncio.create_task(gather_answers(rt, sid, lambda a: len(a) == 3))
        await rt.submit(user("analyse the logs", sid))
        await _until(lambda: len(model.requests) == 2)
        await rt.wait_idle(sid)
        await rt.submit(user("what time is it?", sid))
        await _until(lambda: len(model.requests) == 3)
        await rt.wait_idle(sid)
        [task] = manager.tasks_of(sid)
        assert task.status == "running"  # answered while the command still runs
        got = await asyncio.wait_for(answers, 30)
        messages = rt.store.trajectories.load_messages(sid)
    assert got[1] == "It is 10:00." and got[2] == "Analysis finished: analysis: 3 anomalies"
    assert trajectory_problems(messages) == []


async def test_2_instructions_sent_during_a_task_arrive_as_one_batch_at_its_end(tmp_path: Path) -> None:
    def respond(request: ModelRequest) -> ModelResponse:
        seen = _visible(request)
        last = seen[-1]
        if last.content == "write the sales report":
            return reply("", call("start_command", {"command": "sleep 3; echo 'Q3 sales: 120'", "title": "sales"}))
        if last.role == "tool" and "Started task" in last.content:
            return reply("", call("wait_task", {"task_id": _started(request)["sales"]}))
        japanese = any("reply in Japanese" in m.content for m in seen)
        html = any("format it as a web page" in m.content for m in seen)
        if japanese and html:
            return reply("<html lang='ja'><body><h1>売上報告</h1><p>第3四半期の売上: 120</p></body></html>")
        return reply("report in English, plain text")

    manager = TaskManager(poll_s=0.05)
    model = ScriptedModel([respond] * 4)
    async with Runtime(Agent(model, tools=tools()), SessionStore(tmp_path), components=[manager]) as rt:
        await manager.ready()
        sid = rt.create_session()
        await rt.submit(user("write the sales report", sid))

        await _until(lambda: _calls(rt, sid, "wait_task"))
        await rt.submit(user("don't forget to reply in Japanese", sid))
        await rt.submit(user("format it as a web page", sid))
        assert manager.tasks_of(sid)[0].status == "running"
        await _until(lambda: len(model.requests) == 3)
        await rt.wait_idle(sid)
        messages = rt.store.trajectories.load_messages(sid)
    last = _visible(model.requests[-1])
    assert last[-3].role == "tool" and "Q3 sales: 120" in last[-3].content  # the task's end, then the batch
    assert last[-2].content.startswith("[Unprocessed Event 1/2] don't forget to reply in Japanese")
    assert last[-1].content.startswith("[Unprocessed Event 2/2] format it as a web page")
    assert messages[-1].content.startswith("<html lang='ja'>")
    assert not any("<task_result" in m.content for m in messages)  # reported once, by wait_task
    assert trajectory_problems(messages) == []


async def test_3_never_mind_interrupts_and_cancels_the_async_tool(tmp_path: Path) -> None:
    def respond(request: ModelRequest) -> ModelResponse:
        seen = _visible(request)
        last = seen[-1]
        if last.content == "rebuild the index":
            return reply("", call("start_command", {"command": "echo indexing; sleep 60", "title": "index"}))
        if last.role == "tool" and "Started task" in last.content:
            return reply("", call("wait_task", {"task_id": _started(request)["index"]}))
        if last.content == "never mind":
            return reply("", call("cancel_task", {"task_id": _started(request)["index"]}))
        if last.role == "tool" and "Cancelled" in last.content:
            return reply("Stopped: the index rebuild is cancelled.")
        return reply("?")

    manager = TaskManager(poll_s=0.05, kill_grace_s=2)
    model = ScriptedModel([respond] * 5)
    async with Runtime(Agent(model, tools=tools()), SessionStore(tmp_path), components=[manager]) as rt:
        await manager.ready()
        sid = rt.create_session()
        await rt.submit(user("rebuild the index", sid))
        await _until(lambda: _calls(rt, sid, "wait_task"))
        receipt = await rt.submit(user("never mind", sid, "user.interrupt"))
        assert receipt.strategy == "interrupt"
        await _until(lambda: len(model.requests) == 4)
        await rt.wait_idle(sid)
        messages = rt.store.trajectories.load_messages(sid)
        [task] = manager.tasks_of(sid)
    assert task.status == "cancelled" and task.pid is not None and not alive(task.pid, "")
    roles = [(m.role, m.content[:40]) for m in messages]
    wait_result = next(i for i, m in enumerate(messages) if m.content == INTERRUPTED_TOOL_RESULT)
    assert messages[wait_result + 1].content == "never mind"  # the interrupt event is in the trajectory
    cancel = messages[wait_result + 2]
    assert cancel.tool_calls and cancel.tool_calls[0].name == "cancel_task", roles  # and the cancel action
    assert "Cancelled task" in messages[wait_result + 3].content
    assert messages[-1].content.startswith("Stopped") and trajectory_problems(messages) == []


def _job(rate: int) -> str:
    return (
        f"p=0; while [ $p -lt 100 ]; do sleep 0.2; p=$((p+{rate})); [ $p -gt 100 ] && p=100; "
        f'echo "progress $p%"; done; echo "job{rate} result: {rate * 11} rows"'
    )


async def test_4_three_jobs_the_first_done_the_others_queried_the_slow_one_cancelled(tmp_path: Path) -> None:
    seen_progress: dict[str, float] = {}

    def respond(request: ModelRequest) -> ModelResponse:
        seen = _visible(request)
        last = seen[-1]
        ids = _started(request)
        if last.content.startswith("run the three jobs"):
            return reply("", *(call("start_command", {"command": _job(r), "title": f"job{r}"}) for r in (3, 2, 1)))
        if last.role == "tool" and "Started task" in last.content:
            return reply("All three are running.")
        if "<task_result" in last.content and ids["job3"] in last.content:
            return reply(
                "", call("task_status", {"task_id": ids["job2"]}), call("task_status", {"task_id": ids["job1"]})
            )
        if last.role == "tool" and "progress" in last.content and not seen_progress:
            for m in seen[-2:]:
                tid = re.match(r"(t-[0-9a-f]+)", m.content)
                pct = re.search(r"progress (\d+)%", m.content)
                if tid and pct:
                    seen_progress[tid.group(1)] = float(pct.group(1))
            slow = [tid for tid, p in seen_progress.items() if p < 50]
            return reply("", *(call("cancel_task", {"task_id": t}) for t in slow))
        if last.role == "tool" and "Cancelled" in last.content:
            return reply("Waiting for the remaining job.")
        if "<task_result" in last.content and ids["job2"] in last.content:
            return reply("Report: job3 result: 33 rows; job2 result: 22 rows; job1 cancelled below 50%.")
        return reply("?")

    manager = TaskManager(poll_s=0.05, kill_grace_s=2)
    model = ScriptedModel([respond] * 8)
    async with Runtime(Agent(model, tools=tools()), SessionStore(tmp_path), components=[manager]) as rt:
        await manager.ready()
        sid = rt.create_session()
        answers = asyncio.create_task(gather_answers(rt, sid, lambda a: a[-1].startswith("Report"), 40))
        await rt.submit(user("run the three jobs; when the first ends, check the others, cancel any below 50%", sid))
        got = await asyncio.wait_for(answers, 40)
        await rt.wait_idle(sid)
        messages = rt.store.trajectories.load_messages(sid)
        tasks = {t.title: t for t in manager.tasks_of(sid)}
    assert got[-1].startswith("Report")
    assert tasks["job3"].status == "done" and tasks["job2"].status == "done" and tasks["job1"].status == "cancelled"
    assert 40 <= seen_progress[tasks["job2"].id] <= 90 and seen_progress[tasks["job1"].id] < 50
    results = [m.content for m in messages if "<task_result" in m.content]
    assert len(results) == 2 and "job3 result: 33 rows" in results[0] and "job2 result: 22 rows" in results[1]
    assert trajectory_problems(messages) == []
