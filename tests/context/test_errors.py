"""Four-layer error reports: each layer present, harness frames hidden, targeted suggestions."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from kairos.context.errors import FourLayerErrors, stack_summary, suggestions
from kairos.testing import call
from kairos.tools.base import Tool, ToolContext, ToolSet
from kairos.tools.executor import execute
from kairos.tools.function import tool


def _open(p: Path) -> str:
    return p.read_text(encoding="utf-8")


@tool
def naive_read(path: str, *, ctx: ToolContext) -> str:
    """Read a file the naive way: exceptions propagate.

    Args:
        path: file path
    """
    return _open(ctx.workspace / path)


@tool
def parse_json(text: str) -> str:
    """Parse JSON text."""
    return str(json.loads(text))


class Point(BaseModel):
    x: int


@tool
def make_point(raw: str) -> str:
    """Validate a point."""
    return str(Point.model_validate_json(raw))


@tool
def explode(n: int) -> str:
    """Fail with an unusual error."""
    raise LookupError(f"nothing at {n}")


async def run_tool(t: Tool, args: dict[str, Any], workspace: Path) -> str:
    done = await execute(
        call(t.name, args), ToolSet([t]), ToolContext(workspace=workspace), format_error=FourLayerErrors()
    )
    result = done.result
    assert result.is_error
    return result.content


async def test_file_not_found_has_four_layers_and_close_names(workspace: Path) -> None:
    (workspace / "notes").mkdir()
    (workspace / "notes" / "meeting.md").write_text("x")
    (workspace / "notes" / "other.txt").write_text("x")
    text = await run_tool(naive_read, {"path": "notes/meeting.txt"}, workspace)
    lines = text.splitlines()
    assert lines[0] == "Tool 'naive_read' failed."
    assert lines[1].startswith("[1] Error: FileNotFoundError: [Errno 2] No such file or directory:")
    assert lines[2] == '[2] Parameters: {"path": "notes/meeting.txt"}'
    assert lines[3].startswith("[3] Stack")
    stack = text.split("[3]")[1].split("[4]")[0]
    assert "test_errors.py" in stack and "in naive_read" in stack and "in _open" in stack
    assert len(stack.strip().splitlines()) == 4  # the tool's two frames and the innermost (stdlib) one
    assert "executor.py" not in stack and "base.py" not in stack and "asyncio" not in stack
    tips = text.split("[4] How to fix:")[1]
    assert tips.splitlines()[1] == "    - Did you mean 'notes/meeting.md'? (similar names that exist)"
    assert "The nearest existing folder is 'notes/'" in tips
    assert "List the directory first" in tips and "relative to the current directory" in tips
    assert "Do not repeat the same call unchanged" in tips


async def test_missing_folder_points_to_the_nearest_existing_one(workspace: Path) -> None:
    (workspace / "config").mkdir()
    text = await run_tool(naive_read, {"path": "conf/app.ini"}, workspace)
    assert "Did you mean 'config/'?" in text
    assert "The nearest existing folder is './'" in text


async def test_json_validation_and_generic_suggestions(workspace: Path) -> None:
    text = await run_tool(parse_json, {"text": "{'a': 1}"}, workspace)
    assert "JSONDecodeError" in text and "not valid JSON at line 1, column 2" in text
    text = await run_tool(make_point, {"raw": '{"x": "many"}'}, workspace)
    assert "ValidationError" in text and "These fields are invalid: x:" in text
    text = await run_tool(explode, {"n": 3}, workspace)
    assert "[1] Error: LookupError: nothing at 3" in text
    assert "Check the parameters against the tool's schema: n." in text


@pytest.mark.parametrize(
    ("exc", "needle"),
    [
        (PermissionError("denied"), "outside the workspace"),
        (TimeoutError(), "took too long"),
        (subprocess.TimeoutExpired("sleep", 5), "took too long"),
        (IsADirectoryError("d"), "is a directory"),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"), "not UTF-8"),
        (ConnectionResetError(), "could not be reached"),
        (ValueError("bad"), "A parameter value was not accepted"),
        (OSError("disk"), "operating-system error"),
    ],
)
def test_suggestions_per_type(exc: BaseException, needle: str) -> None:
    tips = suggestions(exc, explode, {})
    assert needle in tips[0] and tips[-1].startswith("Do not repeat")


def test_stack_is_trimmed_to_the_tools_frames() -> None:
    def deep(n: int) -> None:
        if n == 0:
            raise RuntimeError("bottom")
        deep(n - 1)

    try:
        deep(6)
    except RuntimeError as e:
        frames = stack_summary(e, explode, max_frames=3)
    assert len(frames) == 3 and all("in deep" in f or "test_stack" in f for f in frames)
    assert frames[-1].endswith('raise RuntimeError("bottom")')


def test_long_parameters_are_cut() -> None:
    text = FourLayerErrors(max_param_chars=20)(call("explode"), explode, {"n": "9" * 100}, ValueError("x"))
    assert "[2] Parameters: " in text and "… [cut]" in text
