"""Runs an agent whose side-effecting tool appends to a file, then stalls where the test will SIGKILL it.

Usage: python _effects_driver.py WORKSPACE MODE   (MODE: ``during`` the tool, or ``after`` it returned)
Writes ``session.txt`` (the session id) and ``stalled`` (the kill point is reached) in WORKSPACE.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from kairos.agent import Agent
from kairos.agent.plugin import Plugin, RunContext
from kairos.context.session import SessionStore
from kairos.models.types import ToolCall
from kairos.testing import ScriptedModel, call, reply
from kairos.tools.base import Tool, ToolResult
from kairos.tools.executor import idempotency_key
from kairos.tools.function import tool

WORKSPACE, MODE = Path(sys.argv[1]), sys.argv[2]


async def stall() -> None:
    (WORKSPACE / "stalled").write_text("")
    await asyncio.sleep(3600)


@tool(side_effects=True)
async def pay(amount: int) -> str:
    """Pay once."""
    with (WORKSPACE / "payments.txt").open("a") as f:
        f.write(f"{amount} {idempotency_key()}\n")
    if MODE == "during":
        await stall()
    return f"paid {amount}"


class StallAfter(Plugin):
    async def after_tool(self, ctx: RunContext, call: ToolCall, tool: Tool | None, result: ToolResult) -> ToolResult:
        if MODE == "after":
            await stall()
        return result


async def main() -> None:
    store = SessionStore(WORKSPACE)
    session = store.new("pay")
    (WORKSPACE / "session.txt").write_text(session.id)
    model = ScriptedModel([reply("", call("pay", {"amount": 30}, id="call_pay")), reply("done")])
    async for _ in Agent(model, tools=[pay], plugins=[StallAfter()]).run(session, "pay the 30"):
        pass


asyncio.run(main())
