"""Async tasks: real detached subprocesses, result events, progress, cancel, monitor_shell, restarts."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from kairos.agent import Agent
from kairos.context.session import INTERRUPTED_TOOL_RESULT, SessionStore
from kairos.runtime import RUNTIME_RESOURCE, Event, Runtime, RuntimeHandle
from kairos.runtime.integrations._tasks_proc import alive
from kairos.runtime.integrations.tasks import TaskManager, tools
from kairos.testing import ScriptedModel, call, reply
from kairos.tools.base import ToolContext


async def _until(check, timeout_s: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        while not check():  # noqa: ASYNC110 (polls state in the database and /proc)
            await asyncio.sleep(0.05)


def _ctx(rt: Runtime, sid: str, workspace: Path) -> ToolContext:
    ctx = ToolContext(workspace=workspace, session_id=sid)
    ctx.put(RUNTIME_RESOURCE, RuntimeHandle(rt, sid))
    return ctx


async def test_a_command_runs_in_the_background_and_its_result_comes_as_an_event(tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text("42\n")
    os.environ["KAIROS_TEST_API_KEY"] = "sk-secret"
    try:
        model = ScriptedModel(
            [
                reply("", call("start_command", {"command": "sleep 0.5; cat data.txt; echo key=$KAIROS_TEST_API_KEY"})),
                reply("started it"),
                reply("the result is in"),
            ]
        )
        manager = TaskManager(poll_s=0.05)
        async with Runtime(Agent(model, tools=tools()), SessionStore(tmp_path), components=[manager]) as rt:
            await manager.ready()
            sid = rt.create_session()
            await rt.submit(Event("user.input", "count it", session=sid))
            await _until(lambda: len(model.requests) == 3)
            await rt.wait_idle(sid)
            messages = rt.store.trajectories.load_messages(sid)
            [task] = manager.tasks_of(sid)
    finally:
        del os.environ["KAIROS_TEST_API_KEY"]
    assert messages[2].role == "tool" and f"Started task {task.id}" in messages[2].content
    assert messages[3].content == "started it"
    result = messages[4].content
    assert result.startswith(f'<task_result id="{task.id}"') and 'status="completed"' in result
    assert "42" in result and "exit code 0" in result
    assert "sk-secret" not in result and "key=" in result  # the tool environment has no secrets
    assert task.status == "done" and task.exit_code == 0


async def test_progress_status_cancel_and_a_failing_command(tmp_path: Path) -> None:
    manager = TaskManager(poll_s=0.05, kill_grace_s=1.0)
    async with Runtime(Agent(ScriptedModel([])), SessionStore(tmp_path), components=[manager]) as rt:
        await manager.ready()
        sid = rt.create_session()
        ctx = _ctx(rt, sid, tmp_path)
        status = {t.name: t for t in tools()}
        script = "for i in 1 2 3 4 5 6 7 8 9; do echo step $i; echo $((i*10))%; sleep 0.1; done; sleep 60"
        slow = await manager.start_command(sid, script, title="slow", cwd=tmp_path, env=ctx.environment())
        await _until(lambda: (manager.get(slow.id).percent or 0) >= 50)  # type: ignore[union-attr]
        shown = (await status["task_status"].call({"task_id": slow.id}, ctx)).content
        assert "running" in shown and "progress" in shown and "step" in shown
        other = await status["task_status"].call({"task_id": "t-nope"}, ctx)
        assert other.is_error
        listing = (await status["task_status"].call({}, ctx)).content
        assert slow.id in listing
        cancelled = await status["cancel_task"].call({"task_id": slow.id}, ctx)
        assert "Cancelled" in cancelled.content
        info = manager.get(slow.id)
        assert info is not None and info.status == "cancelled" and info.pid is not None
        assert not alive(info.pid, "")  # the whole group is gone (the sleep too)
        bad = await manager.start_command(sid, "echo broken >&2; exit 3", cwd=tmp_path, env=ctx.environment())
        info_bad, summary, ended = await manager.wait(bad.id, 20)
        await rt.wait_idle(sid)
    assert ended and info_bad.status == "failed" and info_bad.exit_code == 3 and "broken" in summary


async def test_monitor_shell_posts_coalesced_matches(tmp_path: Path) -> None:
    model = ScriptedModel([reply("noted")] * 10)
    manager = TaskManager(poll_s=0.05, match_interval_s=0.5)
    async with Runtime(Agent(model), SessionStore(tmp_path), components=[manager]) as rt:
        await manager.ready()
        sid = rt.create_session()
        ctx = _ctx(rt, sid, tmp_path)
        monitor = {t.name: t for t in tools()}["monitor_shell"]
        script = "for i in 1 2 3 4 5 6; do echo ok $i; echo ERROR $i; done; sleep 0.3; echo ERROR late"
        result = await monitor.call({"command": script, "pattern": "ERROR"}, ctx)
        assert "Started task" in result.content and not result.is_error
        bad = await monitor.call({"command": "true", "pattern": "(["}, ctx)
        assert bad.is_error and "regular expression" in bad.content
        await _until(lambda: manager.tasks_of(sid)[0].status != "running")
        await _until(lambda: "<task_result" in " ".join(m.content for m in rt.store.trajectories.load_messages(sid)))
        await rt.wait_idle(sid)
        texts = [m.content for m in rt.store.trajectories.load_messages(sid) if "matched /ERROR/" in m.content]
    joined = "\n".join(texts)
    assert all(f"ERROR {i}" in joined for i in range(1, 7)) and "ERROR late" in joined
    assert "ok 1" not in joined
    assert len(texts) < 7  # coalesced, not one event per line


async def test_without_the_runtime_the_tools_say_so(tmp_path: Path) -> None:
    ctx = ToolContext(workspace=tmp_path)
    for t in tools():
        args = {"command": "true", "pattern": "x", "task_id": "t-1"}
        schema = t.spec.parameters.get("properties", {})
        result = await t.call({k: v for k, v in args.items() if k in schema}, ctx)
        assert result.is_error and "runtime" in result.content


async def test_after_a_restart_a_live_task_is_reattached_and_a_dead_one_reported(tmp_path: Path) -> None:
    model = ScriptedModel([reply("ok")] * 10)
    store = SessionStore(tmp_path)
    first = TaskManager(poll_s=0.05)
    async with Runtime(Agent(model), store, components=[first]) as rt:
        await first.ready()
        sid = rt.create_session()
        env = dict(os.environ)
        survivor = await first.start_command(sid, "sleep 1; echo survived; exit 4", cwd=tmp_path, env=env)
        coro = first.spawn_coroutine(sid, "slow coroutine", lambda: asyncio.sleep(30, result="never"))
    # the runtime stopped; the command goes on (it is detached), the coroutine died with it
    assert survivor.pid is not None and alive(survivor.pid, "")
    second = TaskManager(poll_s=0.05)
    async with Runtime(Agent(model), SessionStore(tmp_path), components=[second]) as rt:
        await second.ready()
        await _until(lambda: second.get(survivor.id).status != "running", 30)  # type: ignore[union-attr]
        # the task's status changes before its result event is posted: wait for the event itself
        await _until(lambda: any("survived" in m.content for m in rt.store.trajectories.load_messages(sid)), 30)
        await rt.wait_idle(sid)
        messages = rt.store.trajectories.load_messages(sid)
        ended = second.get(survivor.id)
    assert ended is not None and ended.status == "failed" and ended.exit_code == 4  # the wrapper kept the code
    text = "\n".join(m.content for m in messages)
    assert "survived" in text and coro.id in text and "stopped with the runtime" in text


async def test_a_coroutine_task_reports_its_return_value(tmp_path: Path) -> None:
    model = ScriptedModel([reply("got it")])
    manager = TaskManager()
    async with Runtime(Agent(model), SessionStore(tmp_path), components=[manager]) as rt:
        await manager.ready()
        sid = rt.create_session()

        async def work() -> str:
            await asyncio.sleep(0.2)
            return "the answer is 7"

        task = manager.spawn_coroutine(sid, "compute", work)
        await _until(lambda: len(model.requests) == 1)
        await rt.wait_idle(sid)
        messages = rt.store.trajectories.load_messages(sid)
    assert task.id in messages[0].content and "the answer is 7" in messages[0].content


# -- idempotency: a side-effecting call is not repeated after kill -9 --------------------------

DRIVER = Path(__file__).with_name("_effects_driver.py")


async def _kill_at(workspace: Path, mode: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = await asyncio.create_subprocess_exec(sys.executable, str(DRIVER), str(workspace), mode, env=env)
    try:
        await _until(lambda: (workspace / "stalled").exists() or child.returncode is not None, 30)
        assert (workspace / "stalled").exists(), "the driver ended before its kill point"
    finally:
        child.kill()  # SIGKILL: no cleanup runs
        await child.wait()
    return (workspace / "session.txt").read_text()


def _naive_model() -> ScriptedModel:
    """Pays again whenever the cut call got the plain placeholder (what a model would do)."""

    def decide(request):  # type: ignore[no-untyped-def]
        last = [m for m in request.messages if m.role == "tool"][-1].content
        if last == INTERRUPTED_TOOL_RESULT:
            return reply("", call("pay", {"amount": 30}))
        return reply("nothing to repeat: " + last[:40])

    return ScriptedModel([decide, reply("done")])


async def test_a_finished_side_effect_cut_by_a_crash_gets_its_recorded_result(tmp_path: Path) -> None:
    sid = await _kill_at(tmp_path, "after")
    assert (tmp_path / "payments.txt").read_text().count("\n") == 1
    session = SessionStore(tmp_path).resume(sid)
    try:
        assert session.messages[-1].role == "tool" and session.messages[-1].content == "paid 30"
        async for _ in Agent(_naive_model(), tools=[]).run(session):
            pass
    finally:
        await session.aclose()
    lines = (tmp_path / "payments.txt").read_text().splitlines()
    assert lines == [f"30 {sid}:call_pay"]  # once, with the call's stable idempotency key


async def test_a_side_effect_cut_while_running_says_it_may_have_happened(tmp_path: Path) -> None:
    sid = await _kill_at(tmp_path, "during")
    session = SessionStore(tmp_path).resume(sid)
    try:
        text = session.messages[-1].content
    finally:
        await session.aclose()
    assert text != INTERRUPTED_TOOL_RESULT and "may or may not have happened" in text and f"{sid}:call_pay" in text
