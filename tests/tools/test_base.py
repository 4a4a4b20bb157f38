"""The ``@tool`` decorator, ``Tool``, ``ToolContext`` and ``ToolRegistry``."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import ValidationError

from kairos.tools.base import (
    Tool,
    ToolContext,
    ToolRegistry,
    ToolResult,
    format_validation_error,
    parse_docstring,
    to_result,
    tool,
)


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
        result: ToolResult = await where.call(where.validate({"path": "a/b"}), ToolContext(workspace=tmp_path))
        return result

    assert asyncio.run(go()).content == str(tmp_path.resolve() / "a" / "b")


async def test_sync_tools_run_in_a_worker_thread() -> None:
    seen: list[str] = []

    @tool
    def record() -> str:
        """Record the thread."""
        seen.append(threading.current_thread().name)
        return "ok"

    result = await record.call(record.validate({}), ToolContext(workspace=Path(".")))
    assert result == ToolResult("ok")
    assert seen and seen[0] != threading.current_thread().name


async def test_async_tools_are_awaited_and_results_serialised(tmp_path: Path) -> None:
    args = _search.validate({"query": "x", "tags": ["a"]})
    result = await _search.call(args, ToolContext(workspace=tmp_path))
    assert result.content == '{"query": "x", "tags": ["a"], "mode": "fast"}'
    assert not result.is_error
    assert (await add.call(add.validate({"a": 1}), ToolContext(workspace=tmp_path))).content == "3"


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
    with pytest.raises(ValidationError) as info:
        add.validate(args)
    message = format_validation_error(add, info.value)
    assert message.startswith("Invalid arguments for tool 'add': ")
    assert problem in message
    assert '"required": ["a"]' in message  # the schema is repeated so the model can fix the call


def test_validation_coerces_like_pydantic() -> None:
    assert add.validate({"a": "4"}).model_dump() == {"a": 4, "b": 2}


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

    ctx = ToolContext(workspace=tmp_path, resources={"res": Res(), "plain": 1})
    await ctx.aclose()
    assert closed == ["res"]
    assert ctx.resources == {}


def test_registry_sorts_by_name_and_refuses_duplicates() -> None:
    reg = ToolRegistry([where, add, _search])
    assert reg.names() == ["add", "search_notes", "where"]
    assert [s.name for s in reg.specs()] == reg.names()
    with pytest.raises(ValueError, match="unique"):
        reg.add(add)
    assert reg.get("add") is add and reg.get("nope") is None
    assert len(reg) == 3 and list(reg) == [add, _search, where]
