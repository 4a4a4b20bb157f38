"""The loop guard in the agent loop: repeats masked and stopped, failures not run a third time,
read-only calls answered from the turn's first result, a run without progress stopped early."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kairos.agent import Agent, Plugin, RunContext
from kairos.agent.events import AgentEvent, FinalAnswer, ToolCallFinished
from kairos.agent.guard import IDLE_STEPS, REPEATED_FAILURE, REUSED, REUSED_NOTE, STOP_AT
from kairos.context.builder import BasicStatus, NoStatus
from kairos.context.inbox import UserInput
from kairos.context.session import Session
from kairos.models.types import AllBut, ModelRequest, SystemPrompt, ToolCall
from kairos.plugins.status_bar import StatusBar, StatusBarConfig
from kairos.testing import ScriptedModel, call, reply, trajectory_problems
from kairos.tools.audit import NOT_RUN_KEY
from kairos.tools.base import Tool, ToolResult
from kairos.tools.builtins import bash, current_time, read_file, write_file
from kairos.tools.builtins.clock import CLOCK_RESOURCE
from kairos.tools.function import tool

FIXED = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)


@tool
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


def make_agent(model: ScriptedModel, tools: list[Tool], *, status: Any = None, **kw: Any) -> Agent:
    system = SystemPrompt("You are a test agent.")
    return Agent(model, tools=tools, system=system, status=status or NoStatus(), **kw)


async def collect(agent: Agent, session: Session, text: str) -> list[AgentEvent]:
    return [e async for e in agent.run(session, text)]


def final(events: list[AgentEvent]) -> FinalAnswer:
    finals = [e for e in events if isinstance(e, FinalAnswer)]
    assert len(finals) == 1
    return finals[0]


def tool_messages(session: Session) -> list[str]:
    return [m.content for m in session.messages if m.role == "tool"]


def finished(events: list[AgentEvent]) -> list[ToolCallFinished]:
    return [e for e in events if isinstance(e, ToolCallFinished)]


def status_text(request: ModelRequest) -> str:
    return request.messages[-1].content


def audit_outcomes(workspace: Path) -> list[str]:
    lines = (workspace / ".kairos" / "audit.jsonl").read_text().splitlines()
    return [json.loads(line)["outcome"] for line in lines]


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


# ---- an identical call that failed twice: the issue's `cd repo && git status` ----------------


async def test_the_issues_failing_command_runs_twice_and_is_then_answered_without_running(
    session: Session, workspace: Path
) -> None:
    """Five identical `cd repo && git status` from inside the repo: the results differed only in bash's line N."""
    cd_repo = {"command": "cd repo && git status"}
    model = ScriptedModel([reply("", call("bash", cd_repo)) for _ in range(5)] + [reply("done")])
    agent = make_agent(model, [bash], status=BasicStatus(clock=lambda: FIXED))
    events = await collect(agent, session, "fix the failing test in this repo")
    results = finished(events)
    ran = [r for r in results if NOT_RUN_KEY not in r.result.metadata]
    assert len(ran) == 2 and all("cd: repo: No such file or directory" in r.result.content for r in ran)
    assert ran[0].result.content != ran[1].result.content  # bash counted its lines: line 1, line N
    refused = [r for r in results if r.result.metadata.get(NOT_RUN_KEY) == REPEATED_FAILURE]
    assert refused and refused[0].result.content.startswith("Not run: this exact call already failed 2 times")
    assert audit_outcomes(workspace)[2:] == ["not_run"] * len(refused)
    # the model is told why once, in the status of the request after the refusal; no earlier message changes
    notes = [i for i, r in enumerate(model.requests) if "Loop guard: `bash" in status_text(r)]
    assert notes == [3]
    for before, after in zip(model.requests, model.requests[1:], strict=False):
        assert after.messages[: len(before.messages) - 1] == before.messages[:-1]  # status aside: a prefix
    end = final(events)
    assert end.stop_reason == "loop_guard" and "cd repo && git status" in end.text
    assert len(model.requests) < 5  # stopped without progress, not after the script ran out
    assert trajectory_problems(session.messages) == []


async def test_a_failing_test_run_runs_again_after_an_edit(session: Session, workspace: Path) -> None:
    """Fixing a test means running the same failing command again and again, with edits in between."""
    (workspace / "check.sh").write_text("grep -q fixed notes.txt || { echo 'FAILED: not fixed'; exit 1; }\necho ok\n")
    (workspace / "notes.txt").write_text("broken\n")
    run_check = call("bash", {"command": "bash check.sh"})
    model = ScriptedModel(
        [
            reply("", run_check),
            reply("", call("write_file", {"path": "notes.txt", "content": "still broken\n"})),
            reply("", call("bash", {"command": "bash check.sh"})),
            reply("", call("write_file", {"path": "notes.txt", "content": "fixed\n"})),
            reply("", call("bash", {"command": "bash check.sh"})),
            reply("the check passes"),
        ]
    )
    events = await collect(make_agent(model, [bash, write_file]), session, "make the check pass")
    assert final(events).text == "the check passes"
    checks = [r.result for r in finished(events) if r.call.name == "bash"]
    assert [NOT_RUN_KEY in r.metadata for r in checks] == [False, False, False]
    assert checks[-1].content == "ok"


# ---- an identical read-only call within a turn ---------------------------------------------------


async def test_a_repeated_read_is_answered_from_the_first_until_something_writes(
    session: Session, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("old\n")
    read = {"path": "a.txt"}
    model = ScriptedModel(
        [
            reply("", call("read_file", read)),
            reply("", call("read_file", read)),
            reply("", call("write_file", {"path": "a.txt", "content": "new\n"})),
            reply("", call("read_file", read)),
            reply("done"),
        ]
    )
    events = await collect(make_agent(model, [read_file, write_file]), session, "read a.txt")
    assert final(events).text == "done"
    reads = [r.result for r in finished(events) if r.call.name == "read_file"]
    assert [r.metadata.get(NOT_RUN_KEY) for r in reads] == [None, REUSED, None]
    assert reads[1].content == reads[0].content + REUSED_NOTE
    assert "old" in reads[0].content and "new" in reads[2].content
    assert audit_outcomes(workspace) == ["ok", "not_run", "ok", "ok"]


async def test_the_clock_is_read_once_per_turn(session: Session) -> None:
    """current_time is read-only but ticks: its first answer stands for the turn (and says so); a new turn reads it."""
    ticks = iter(FIXED + timedelta(minutes=m) for m in range(100))
    session.tool_context.put(CLOCK_RESOURCE, lambda: next(ticks))
    utc = {"timezone": "UTC"}
    model = ScriptedModel([reply("", call("current_time", utc)) for _ in range(2)] + [reply("10:00")])
    agent = make_agent(model, [current_time])
    first = [r.result.content for r in finished(await collect(agent, session, "what time is it?"))]
    assert first[0].startswith("2026-05-04T10:00:00+00:00") and first[1] == first[0] + REUSED_NOTE
    model.extend([reply("", call("current_time", utc)), reply("10:01")])
    second = [r.result.content for r in finished(await collect(agent, session, "and now?"))]
    assert second == ["2026-05-04T10:01:00+00:00 (Monday) in UTC, UTC offset +00:00"]


async def test_a_volatile_tool_runs_every_time(session: Session) -> None:
    progress = iter(range(0, 100, 10))

    @tool(read_only=True, volatile=True)
    def job_status() -> str:
        """A job's progress."""
        return f"{next(progress)}% done"

    model = ScriptedModel([reply("", call("job_status")) for _ in range(3)] + [reply("done")])
    events = await collect(make_agent(model, [job_status]), session, "how is the job?")
    assert [r.result.content for r in finished(events)] == ["0% done", "10% done", "20% done"]


# ---- no progress -----------------------------------------------------------------------------------


async def test_a_run_going_round_in_circles_stops_long_before_max_iterations(session: Session) -> None:
    """Two calls taking turns, their results never changing: no single pair reaches the stop, the run still ends."""
    a, b = {"text": "a"}, {"text": "b"}
    model = ScriptedModel([reply("", call("echo", a if i % 2 == 0 else b)) for i in range(20)])
    events = await collect(make_agent(model, [echo], max_iterations=20), session, "go")
    end = final(events)
    assert end.stop_reason == "loop_guard" and end.text.startswith("Stopped: the last 3 steps brought nothing new")
    assert len(model.requests) == 2 + IDLE_STEPS
    assert "'echo' was called" not in end.text  # not the repeat rule: no pair was seen STOP_AT times
    assert trajectory_problems(session.messages) == []


async def test_new_results_keep_a_long_run_going(session: Session) -> None:
    model = ScriptedModel([reply("", call("echo", {"text": str(i)})) for i in range(12)] + [reply("done")])
    events = await collect(make_agent(model, [echo], max_iterations=20), session, "count")
    assert final(events).text == "done"


async def test_a_refused_repeat_never_reaches_the_approval(session: Session) -> None:
    """A call that will not run is not put to the user (or a reviewer) for approval."""
    asked: list[str] = []

    class Approval(Plugin):
        stage = "guard"

        async def before_tool(self, ctx: RunContext, call: ToolCall, tool: Tool) -> ToolResult | None:
            asked.append(call.arguments)
            return None

    @tool(side_effects=True)
    def deploy() -> ToolResult:
        """Deploy."""
        return ToolResult("deploy failed: no credentials", is_error=True)

    model = ScriptedModel([reply("", call("deploy")) for _ in range(4)] + [reply("done")])
    await collect(make_agent(model, [deploy], plugins=[Approval()]), session, "deploy")
    assert len(asked) == 2


async def test_input_that_arrives_mid_run_lets_a_refused_call_run_again(session: Session) -> None:
    """The user says "I created it, try again" while the agent works: the failing call is worth one more run."""
    runs: list[int] = []

    @tool(side_effects=True)
    def open_repo() -> ToolResult:
        """Open the repo."""
        runs.append(1)
        if len(runs) == 2:
            session.post(UserInput("I created the repo folder, try again"))  # joins at the next safe point
        return ToolResult("No such directory: repo", is_error=True)

    model = ScriptedModel([reply("", call("open_repo")) for _ in range(3)] + [reply("still missing")])
    events = await collect(make_agent(model, [open_repo]), session, "open the repo")
    assert len(runs) == 3 and final(events).text == "still missing"
    assert [m.content for m in session.messages if m.role == "user"][-1] == "I created the repo folder, try again"
