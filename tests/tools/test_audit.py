"""The audit log the executor writes for every call: ok, error, timeout, cancelled, unknown tool, bad JSON."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from kairos.testing import call
from kairos.tools.audit import AUDIT_FILE, args_digest
from kairos.tools.base import ToolContext, ToolSet
from kairos.tools.executor import execute
from kairos.tools.function import tool


@tool
def echo(text: str) -> str:
    """Echo."""
    return text


@tool(timeout_s=0.05)
async def hang() -> str:
    """Never return (stopped by its timeout)."""
    await asyncio.Event().wait()
    return ""


@tool
async def forever() -> str:
    """Wait until cancelled."""
    await asyncio.Event().wait()
    return ""


TOOLS = ToolSet([echo, hang, forever])


def lines(ws: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (ws / ".kairos" / AUDIT_FILE).read_text().splitlines()]


async def test_every_outcome_gets_a_line(tmp_path: Path) -> None:
    ctx = ToolContext(workspace=tmp_path, session_id="s9")
    await execute(call("echo", {"text": "hi"}, id="a"), TOOLS, ctx)
    await execute(call("echo", {"text": 3}, id="b"), TOOLS, ctx)
    await execute(call("hang", {}, id="c"), TOOLS, ctx)
    await execute(call("missing", {}, id="d"), TOOLS, ctx)
    await execute(call("echo", "{not json", id="e"), TOOLS, ctx)
    task = asyncio.ensure_future(execute(call("forever", {}, id="f"), TOOLS, ctx))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    got = {x["call_id"]: x for x in lines(tmp_path)}
    assert {k: v["outcome"] for k, v in got.items()} == {
        "a": "ok", "b": "error", "c": "timeout", "d": "error", "e": "error", "f": "cancelled",
    }  # fmt: skip
    assert got["a"]["session"] == "s9" and got["a"]["tool"] == "echo" and got["d"]["tool"] == "missing"
    assert got["a"]["args_sha256"] == args_digest({"text": "hi"}) and got["e"]["args_sha256"] == args_digest(
        "{not json"
    )
    assert all(x["decision"] == "" for x in got.values())  # no permission check ran here
