"""The executor: every mistake of the model becomes a clear error result, hooks in order, outputs capped."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from kairos.agent import Agent
from kairos.agent.events import AgentEvent, FinalAnswer, ToolCallFinished
from kairos.context.builder import NoStatus
from kairos.context.session import Session
from kairos.models.types import SystemPrompt, ToolCall
from kairos.testing import ScriptedModel, call, reply
from kairos.tools.base import Tool, ToolContext, ToolResult, ToolSet
from kairos.tools.executor import FULL_CONTENT, Executed, basic_error, cap_output, execute
from kairos.tools.function import tool
from tests.support.tools import add, echo, explode, slow


@tool(max_output_chars=100)
def chatty(n: int) -> str:
    """Print ``n`` characters."""
    return "x" * n


TOOLS = ToolSet.sorted([add, echo, explode, slow, chatty])


async def run(c: ToolCall, tools: ToolSet = TOOLS, *, workspace: Path, **kw: Any) -> Executed:
    return await execute(c, tools, ToolContext(workspace), **kw)


# ---- what the model got wrong ----------------------------------------------------------------


async def test_an_unknown_tool_names_the_available_ones(tmp_path: Path) -> None:
    done = await run(call("nope", {}), workspace=tmp_path)
    assert done.result.is_error
    assert done.result.content == "Unknown tool 'nope'. Available tools: add, chatty, echo, explode, slow."
    empty = await run(call("nope", {}), ToolSet(), workspace=tmp_path)
    assert empty.result.content == "Unknown tool 'nope'. Available tools: (none)."


async def test_malformed_json_quotes_the_arguments_and_shows_the_schema(tmp_path: Path) -> None:
    done = await run(call("add", '{"a": 1, "b": '), workspace=tmp_path)
    text = done.result.content
    assert done.result.is_error
    assert text.startswith("The arguments for 'add' are not valid JSON")
    assert '\'{"a": 1, "b": \'' in text  # what the model sent, quoted
    assert '"b": {"description": "second addend"' in text  # and the schema to match


async def test_json_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    done = await run(call("add", "[1, 2]"), workspace=tmp_path)
    assert done.result.is_error and "must be a JSON object, got list" in done.result.content


async def test_empty_arguments_mean_no_arguments(tmp_path: Path) -> None:
    done = await run(call("add", "  "), workspace=tmp_path)
    assert done.result.is_error and "Field required" in done.result.content  # validated as {}, not a JSON error


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"a": "one", "b": 2}, "a: Input should be a valid integer"),
        ({"a": 1}, "b: Field required"),
        ({"a": 1, "b": 2, "c": 3}, "c: Extra inputs are not permitted"),
    ],
)
async def test_a_schema_mismatch_explains_itself(tmp_path: Path, arguments: dict[str, Any], problem: str) -> None:
    done = await run(call("add", arguments), workspace=tmp_path)
    assert done.result.is_error and problem in done.result.content
    assert "Expected JSON schema" in done.result.content


async def test_a_tool_exception_goes_through_the_error_formatter(tmp_path: Path) -> None:
    done = await run(call("explode", {"reason": "bad"}), workspace=tmp_path)
    assert done.result.is_error and done.result.content == "Tool 'explode' failed: ValueError: boom: bad"
    assert isinstance(done.result.metadata["exception"], ValueError)

    def formatter(c: ToolCall, t: Tool, args: dict[str, Any], exc: BaseException) -> str:
        return f"{t.name}{args} -> {exc}"

    custom = await run(call("explode", {"reason": "bad"}), workspace=tmp_path, format_error=formatter)
    assert custom.result.content == "explode{'reason': 'bad'} -> boom: bad"
    assert basic_error(call("x"), explode, {}, KeyError("k")) == "Tool 'explode' failed: KeyError: 'k'"


# ---- timeouts ----------------------------------------------------------------------------------


async def test_a_timeout_is_an_error_result_that_says_so(tmp_path: Path) -> None:
    done = await run(call("slow", {"seconds": 30}), workspace=tmp_path)
    assert done.result.is_error and done.result.metadata["timeout_s"] == 0.05
    assert done.result.content.startswith("Tool 'slow' timed out after 0.05 s and was stopped.")


async def test_a_timed_out_sync_tool_really_stops(tmp_path: Path) -> None:
    """Issue 8 §3: the side effects of a timed-out tool must not happen after the model was told."""
    started, release, stopped = threading.Event(), threading.Event(), threading.Event()
    marker = tmp_path / "late"

    @tool(timeout_s=1)  # long enough for the thread to start on a loaded machine
    def stubborn() -> str:
        """Spin in Python until released, then write a file."""
        started.set()
        try:
            while not release.is_set():
                pass
            marker.write_text("written after the timeout")
            return "done"
        finally:
            stopped.set()

    done = await run(call("stubborn"), ToolSet([stubborn]), workspace=tmp_path)
    assert started.is_set() and done.result.is_error and "timed out" in done.result.content
    release.set()
    assert await asyncio.to_thread(stopped.wait, 10)
    assert not marker.exists()


async def test_a_timed_out_async_tool_is_cancelled(tmp_path: Path) -> None:
    cancelled = asyncio.Event()

    @tool(timeout_s=0.05)
    async def waits() -> str:
        """Wait for a long time."""
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    done = await run(call("waits"), ToolSet([waits]), workspace=tmp_path)
    assert done.result.is_error and cancelled.is_set()


# ---- hooks -------------------------------------------------------------------------------------


async def test_a_before_hook_can_answer_instead_of_the_tool(tmp_path: Path) -> None:
    ran: list[str] = []

    @tool
    def side_effect() -> str:
        """Change something."""
        ran.append("ran")
        return "changed"

    async def deny(c: ToolCall, t: Tool) -> ToolResult | None:
        return ToolResult(f"Not run: {t.name} needs approval.", is_error=True)

    done = await run(call("side_effect"), ToolSet([side_effect]), workspace=tmp_path, before=deny)
    assert done.result.content == "Not run: side_effect needs approval." and done.result.is_error
    assert ran == []


async def test_a_before_hook_returning_none_lets_the_tool_run(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []

    async def observe(c: ToolCall, t: Tool) -> ToolResult | None:
        seen.append((c.name, t.name))
        return None

    done = await run(call("add", {"a": 2, "b": 3}), workspace=tmp_path, before=observe)
    assert done.result.content == "5" and seen == [("add", "add")]


@pytest.mark.parametrize("bad", [call("nope"), call("add", "{"), call("add", "[]"), call("add", {"a": 1})], ids=str)
async def test_the_before_hook_sees_only_valid_calls_of_known_tools(tmp_path: Path, bad: ToolCall) -> None:
    seen: list[ToolCall] = []

    async def before(c: ToolCall, t: Tool) -> ToolResult | None:
        seen.append(c)
        return None

    done = await run(bad, workspace=tmp_path, before=before)
    assert done.result.is_error and seen == []


@pytest.mark.parametrize(
    ("c", "tool_name"),
    [
        (call("nope"), None),
        (call("add", "{"), "add"),
        (call("explode", {"reason": "r"}), "explode"),
        (call("slow", {"seconds": 30}), "slow"),
        (call("echo", {"text": "fine"}), "echo"),
    ],
    ids=["unknown", "bad-json", "exception", "timeout", "ok"],
)
async def test_after_hooks_see_every_result_errors_included(tmp_path: Path, c: ToolCall, tool_name: str | None) -> None:
    seen: list[tuple[str | None, bool]] = []

    async def after(call_: ToolCall, t: Tool | None, result: ToolResult) -> ToolResult:
        seen.append((t.name if t is not None else None, result.is_error))
        return ToolResult(result.content + " [annotated]", result.is_error, result.metadata)

    done = await run(c, workspace=tmp_path, after=after)
    assert seen == [(tool_name, tool_name != "echo")]
    assert done.result.content == done.raw.content + " [annotated]"  # raw: before any after hook


async def test_after_hooks_see_what_a_before_hook_answered(tmp_path: Path) -> None:
    async def before(c: ToolCall, t: Tool) -> ToolResult | None:
        return ToolResult("refused", is_error=True)

    async def after(c: ToolCall, t: Tool | None, result: ToolResult) -> ToolResult:
        return ToolResult(result.content + "!", result.is_error)

    done = await run(call("echo", {"text": "x"}), workspace=tmp_path, before=before, after=after)
    assert (done.raw.content, done.result.content) == ("refused", "refused!")


# ---- the output cap ----------------------------------------------------------------------------


async def test_long_output_is_capped_with_a_notice_and_the_full_text_kept_for_the_hooks(tmp_path: Path) -> None:
    got: list[ToolResult] = []

    async def after(c: ToolCall, t: Tool | None, result: ToolResult) -> ToolResult:
        got.append(result)
        return result

    done = await run(call("chatty", {"n": 250}), workspace=tmp_path, after=after)
    text = done.result.content
    assert text.startswith("x" * 100 + "\n[output truncated: showing the first 100 of 250 characters.")
    assert "Ask for less" in text and not done.result.is_error
    assert got[0].metadata[FULL_CONTENT] == "x" * 250 and got[0].metadata["truncated_from"] == 250
    short = await run(call("chatty", {"n": 100}), workspace=tmp_path)
    assert short.result.content == "x" * 100 and FULL_CONTENT not in short.result.metadata


def test_cap_output_leaves_short_results_alone() -> None:
    r = ToolResult("short", metadata={"k": 1})
    assert cap_output(r, 5) is r


def test_cap_output_states_the_true_size_and_where_the_whole_output_is() -> None:
    r = ToolResult("y" * 50, is_error=True, metadata={"total_bytes": 5_000_000, "full_output": "spill/1.txt"})
    capped = cap_output(r, 10)
    assert capped.content == (
        "y" * 10 + "\n[output truncated: showing the first 10 of 50 characters kept of 5,000,000 bytes produced."
        " The full output is in spill/1.txt. Ask for less (offset/limit, a narrower pattern or path) to see the rest.]"
    )
    assert capped.is_error
    assert capped.metadata == {
        "total_bytes": 5_000_000,
        "full_output": "spill/1.txt",
        "truncated_from": 50,
        FULL_CONTENT: "y" * 50,
    }


# ---- through the loop: the model reads the error and recovers ----------------------------------


async def collect(agent: Agent, session: Session, text: str) -> list[AgentEvent]:
    return [e async for e in agent.run(session, text)]


@pytest.mark.parametrize(
    ("bad_call", "expected"),
    [
        (call("add", '{"a": 1, "b": '), "not valid JSON"),
        (call("add", "[1, 2]"), "must be a JSON object"),
        (call("nope", {}), "Unknown tool 'nope'. Available tools: add, echo, explode, slow"),
        (call("add", {"a": "one", "b": 2}), "Expected JSON schema"),
        (call("add", {"a": 1}), "b: Field required"),
        (call("explode", {"reason": "bad"}), "ValueError: boom: bad"),
        (call("slow", {"seconds": 30}), "timed out after 0.05 s"),
    ],
)
async def test_bad_calls_become_clear_errors_for_the_model(session: Session, bad_call: Any, expected: str) -> None:
    model = ScriptedModel([reply("", bad_call), reply("recovered")])
    agent = Agent(
        model, tools=[add, echo, explode, slow], system=SystemPrompt("You are a test agent."), status=NoStatus()
    )
    events = await collect(agent, session, "try")
    finals = [e for e in events if isinstance(e, FinalAnswer)]
    assert len(finals) == 1 and finals[0].text == "recovered"
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert finished[0].result.is_error
    assert expected in [m.content for m in session.messages if m.role == "tool"][0]
    # the error reached the model in its next request
    assert expected in model.requests[1].messages[-1].content
