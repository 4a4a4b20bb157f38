"""The ``Tool`` protocol, ``@tool``, ``SchemaTool``, ``ToolContext``, ``ToolSet`` and where tool code runs."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any, Literal

import pytest

from kairos.tools.base import InvalidArguments, Resource, Slots, Tool, ToolContext, ToolResult, ToolSet, ToolSource
from kairos.tools.function import FunctionTool, parse_docstring, to_result, tool
from kairos.tools.schema import SchemaTool


@tool
def add(a: int, b: int = 2) -> int:
    """Add two integers.

    Args:
        a: the first number.
        b (int): the second number,
            which defaults to two.
    """
    return a + b


@tool(name="search_notes", side_effects=True, external=True, timeout_s=5, max_output_chars=100)
async def _search(query: str, tags: list[str] | None = None, mode: Literal["fast", "exact"] = "fast") -> dict[str, Any]:
    """Search the notes.

    Returns:
        matching notes.
    """
    await asyncio.sleep(0)
    return {"query": query, "tags": tags or [], "mode": mode}


@tool
def where(path: str, ctx: ToolContext) -> str:
    """Resolve a path in the workspace.

    Args:
        path: a path.
    """
    return str(ctx.resolve_path(path))


def test_decorator_builds_a_tool_with_name_description_and_options() -> None:
    assert isinstance(add, Tool)
    assert add.name == "add"
    assert add.description == "Add two integers."
    assert not add.side_effects and not add.external
    assert _search.name == "search_notes"
    assert _search.description == "Search the notes."  # sections other than Args are not in the description
    assert (_search.side_effects, _search.external, _search.timeout_s, _search.max_output_chars) == (True, True, 5, 100)


def test_schema_comes_from_type_hints() -> None:
    params = add.spec.parameters
    assert params["type"] == "object"
    assert params["properties"]["a"]["type"] == "integer"
    assert params["properties"]["b"]["default"] == 2
    assert params["required"] == ["a"]
    search = _search.spec.parameters
    assert search["properties"]["mode"]["enum"] == ["fast", "exact"]
    assert search["required"] == ["query"]
    assert "title" not in str(search)  # pydantic's auto titles are dropped
    assert "additionalProperties" not in search


def test_docstring_args_become_parameter_descriptions() -> None:
    props = add.spec.parameters["properties"]
    assert props["a"]["description"] == "the first number."
    assert props["b"]["description"] == "the second number, which defaults to two."


def test_parse_docstring_splits_description_and_args() -> None:
    desc, args = parse_docstring(
        "Do it.\nReally.\n\nArgs:\n    x: one\n    y (str): two\n\nRaises:\n    ValueError: no"
    )
    assert desc == "Do it.\nReally."
    assert args == {"x": "one", "y": "two"}


def test_tool_context_is_hidden_from_the_schema_and_injected(tmp_path: Path) -> None:
    assert where.context_param == "ctx"
    assert list(where.spec.parameters["properties"]) == ["path"]

    async def go() -> ToolResult:
        result: ToolResult = await where.call({"path": "a/b"}, ToolContext(workspace=tmp_path))
        return result

    assert asyncio.run(go()).content == str(tmp_path.resolve() / "a" / "b")


async def test_sync_tools_run_in_a_worker_thread() -> None:
    seen: list[str] = []

    @tool
    def record() -> str:
        """Record the thread."""
        seen.append(threading.current_thread().name)
        return "ok"

    result = await record.call({}, ToolContext(workspace=Path(".")))
    assert result == ToolResult("ok")
    assert seen and seen[0] != threading.current_thread().name


async def test_async_tools_are_awaited_and_results_serialised(tmp_path: Path) -> None:
    result = await _search.call({"query": "x", "tags": ["a"]}, ToolContext(workspace=tmp_path))
    assert result.content == '{"query": "x", "tags": ["a"], "mode": "fast"}'
    assert not result.is_error
    assert (await add.call({"a": 1}, ToolContext(workspace=tmp_path))).content == "3"


def test_to_result_passes_tool_results_through() -> None:
    r = ToolResult("bad", is_error=True)
    assert to_result(r) is r
    assert to_result("text") == ToolResult("text")
    assert to_result([1, "ü"]).content == '[1, "ü"]'


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({}, "a: Field required"),
        ({"a": "many"}, "a: Input should be a valid integer"),
        ({"a": 1, "c": 3}, "c: Extra inputs are not permitted"),
    ],
)
def test_validation_errors_explain_the_problem(args: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidArguments) as info:
        add.validate(args)
    message = str(info.value)
    assert message.startswith("Invalid arguments for tool 'add': ")
    assert problem in message
    assert '"required": ["a"]' in message  # the schema is repeated so the model can fix the call


async def test_validation_coerces_like_pydantic(tmp_path: Path) -> None:
    add.validate({"a": "4"})
    assert (await add.call({"a": "4"}, ToolContext(workspace=tmp_path))).content == "6"


def test_a_tool_needs_a_docstring() -> None:
    def nodoc(x: int) -> int:
        return x

    with pytest.raises(ValueError, match="docstring"):
        tool(nodoc)


def test_tool_context_confines_paths(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    ctx = ToolContext(workspace=tmp_path, cwd=tmp_path / "sub")
    assert ctx.resolve_path("f.txt") == tmp_path.resolve() / "sub" / "f.txt"
    assert ctx.resolve_path("..") == tmp_path.resolve()
    with pytest.raises(PermissionError, match="outside the workspace"):
        ctx.resolve_path("../..")
    with pytest.raises(PermissionError):
        ctx.resolve_path("/etc/passwd")


async def test_tool_context_aclose_closes_resources(tmp_path: Path) -> None:
    closed: list[str] = []

    class Res:
        async def aclose(self) -> None:
            closed.append("res")

    ctx = ToolContext(workspace=tmp_path, resources={Resource("res"): Res(), Resource("plain"): 1})
    await ctx.aclose()
    assert closed == ["res"]
    assert len(ctx.resources) == 0


def test_resources_are_found_by_their_typed_keys(tmp_path: Path) -> None:
    counter: Resource[list[int]] = Resource("test.counter")
    ctx = ToolContext(workspace=tmp_path)
    assert ctx.get(counter) is None and ctx.take(counter) is None
    made = ctx.get_or_put(counter, list)
    made.append(1)
    assert ctx.get_or_put(counter, list) is made  # made once, then found
    assert ctx.get(Resource("test.counter")) is made  # a key is its name: equal keys find the same object
    assert ctx.take(counter) == [1] and ctx.get(counter) is None
    assert ctx.put(counter, [2]) == [2] and ctx.get(counter) == [2]


def test_a_sub_agent_shares_only_the_resources_named() -> None:
    clock: Resource[str] = Resource("clock")
    shell: Resource[str] = Resource("bash")
    parent, child = Slots({clock: "parent's clock", shell: "parent's shell"}), Slots()
    child.share(parent, ["clock", "kairos.nothing"])
    assert child.get(clock) == "parent's clock" and shell not in child and len(child) == 1


def test_a_first_snapshot_is_sorted_by_name_and_refuses_duplicates() -> None:
    snap = ToolSet.sorted([where, add, _search])
    assert snap.names() == ["add", "search_notes", "where"]
    assert [s.name for s in snap.specs()] == snap.names()
    assert snap.specs() is snap.specs()  # one tuple: identity checks stay cheap per request
    with pytest.raises(ValueError, match="unique"):
        ToolSet([add, add])
    assert snap.get("add") is add and snap.get("nope") is None
    assert len(snap) == 3 and list(snap) == [add, _search, where] and "add" in snap


def test_an_updated_snapshot_appends_new_tools_and_never_reorders() -> None:
    snap = ToolSet.sorted([where, add])
    same, change = snap.updated([add, where])
    assert same is snap and change is None

    @tool(name="add")
    def add_v2(a: int) -> int:
        """Add one (a changed spec)."""
        return a + 1

    new, change = snap.updated([where, add_v2, _search])
    assert new.names() == ["add", "where", "search_notes"]  # kept in place, the new one appended
    assert new.get("add") is add_v2
    assert change == "added search_notes; changed add"
    gone, change = new.updated([where, _search])
    assert gone.names() == ["where", "search_notes"] and change == "removed add"


async def test_a_tool_with_only_a_json_schema_validates_and_runs(tmp_path: Path) -> None:
    async def handler(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        return {"echo": args["text"], "times": args.get("times", 1)}

    schema = {
        "type": "object",
        "properties": {"text": {"type": "string"}, "times": {"type": "integer", "minimum": 1}},
        "required": ["text"],
        "additionalProperties": False,
    }
    t = SchemaTool("echo", "Echo text back.", schema, handler, external=True)
    assert isinstance(t, Tool) and t.spec.parameters is schema and t.external
    t.validate({"text": "hi"})
    for bad, problem in (({}, "'text' is a required property"), ({"text": "x", "times": 0}, "times:")):
        with pytest.raises(InvalidArguments, match="Invalid arguments for tool 'echo'") as info:
            t.validate(bad)
        assert problem in str(info.value)
    assert (await t.call({"text": "hi", "times": 2}, ToolContext(workspace=tmp_path))).content == (
        '{"echo": "hi", "times": 2}'
    )


def test_function_and_schema_tools_satisfy_the_protocols() -> None:
    assert isinstance(add, Tool) and isinstance(add, FunctionTool)
    assert not isinstance(add, ToolSource)


def spin_forever(marker: str) -> str:
    """Burn CPU forever (an isolated tool that must be killed)."""
    Path(marker).write_text(str(os.getpid()))
    while True:
        pass


async def test_an_isolated_tool_runs_in_a_process_that_dies_with_its_timeout(tmp_path: Path) -> None:
    from kairos.testing import call as make_call
    from kairos.tools.executor import execute

    marker = tmp_path / "pid"
    spinner = tool(timeout_s=5, isolate=True)(spin_forever)
    done = await execute(make_call("spin_forever", {"marker": str(marker)}), ToolSet([spinner]), ToolContext(tmp_path))
    assert done.result.is_error and "timed out after 5 s and was stopped" in done.result.content
    pid = int(marker.read_text())
    for _ in range(100):  # the child is killed, not left spinning (bounded wait, no timing assertion)
        if not _alive(pid):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"process {pid} still runs after the timeout")


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent's reap counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


async def test_a_cancelled_sync_tool_stops_at_its_next_python_instruction(tmp_path: Path) -> None:
    started, stopped = threading.Event(), threading.Event()

    @tool
    def busy() -> str:
        """Loop in Python until stopped."""
        started.set()
        try:
            while True:
                pass
        finally:
            stopped.set()

    task = asyncio.ensure_future(busy.call({}, ToolContext(tmp_path)))
    assert await asyncio.to_thread(started.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(stopped.wait, 10)  # the thread did not keep running
