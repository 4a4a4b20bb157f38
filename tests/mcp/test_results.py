"""MCP results as kairos results: nothing dropped silently; names the model can call."""

from __future__ import annotations

from pathlib import Path

import mcp_types as mt
import pytest
from pydantic import ValidationError

from kairos.mcp.client import McpServerSource, to_tool_result, tool_name
from kairos.mcp.config import McpServerConfig
from kairos.mcp.review import ListedTool


def test_every_block_kind_is_shown_or_described() -> None:
    result = mt.CallToolResult(
        content=[
            mt.TextContent(type="text", text="first"),
            mt.ImageContent(type="image", data="aGVsbG8h", mime_type="image/png"),
            mt.ResourceLink(type="resource_link", uri="file:///a.txt", name="a.txt"),
            mt.EmbeddedResource(
                type="resource", resource=mt.TextResourceContents(uri="file:///b.txt", text="embedded text")
            ),
        ]
    )
    out = to_tool_result("srv", "t", result)
    assert not out.is_error and out.metadata == {"mcp_server": "srv", "mcp_tool": "t"}
    assert out.content.split("\n") == [
        "first",
        "[image image/png, 6 bytes, not shown]",
        "[resource file:///a.txt: a.txt]",
        "embedded text",
    ]


def test_structured_only_result_is_json_and_errors_say_so() -> None:
    assert to_tool_result("s", "t", mt.CallToolResult(content=[], structured_content={"n": 1})).content == '{"n": 1}'
    err = to_tool_result("s", "t", mt.CallToolResult(content=[], is_error=True))
    assert err.is_error and err.content == "MCP tool t (server 's') failed: (no message)"


def test_tool_names_are_callable() -> None:
    assert tool_name("files", "read") == "files__read"
    assert tool_name("files", "read.file/v2 x") == "files__read_file_v2_x"
    assert len(tool_name("s", "x" * 200)) == 64


def test_duplicate_and_invalid_tools_are_left_out_not_a_crash(workspace: Path) -> None:
    source = McpServerSource(McpServerConfig(name="s", url="http://127.0.0.1:9/mcp"), workspace)
    obj = {"type": "object"}
    listing = [
        ListedTool("a", "", obj),
        ListedTool("a", "", obj),
        ListedTool("b", "", {"type": 5}),
        ListedTool("x" * 70 + "1", "", obj),
        ListedTool("x" * 70 + "2", "", obj),
    ]
    names = [t.name for t in source._usable(listing)]
    assert names[0] == "s__a" and len(names) == 3 and len(set(names)) == 3
    assert source.skipped[0] == "a (listed twice)"
    assert source.skipped[1].startswith("b (its input schema is invalid: 5 is not valid under any of the given schemas")
    assert "left out: a (listed twice)" in source.describe()


def test_server_names_cannot_hold_the_separator() -> None:
    with pytest.raises(ValidationError, match="must not contain '__'"):
        McpServerConfig(name="a__b", command=("x",))
