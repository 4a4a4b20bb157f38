"""An MCP server's unapproved tools are asked about in the outbox (chat, /v1/questions, the web UI)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kairos.agent import Agent
from kairos.cli._runtime import outbox_review
from kairos.context.session import SessionStore
from kairos.mcp.client import McpServerSource
from kairos.mcp.review import McpReview
from kairos.runtime import Runtime
from kairos.runtime.integrations.outbox import Outbox
from kairos.security.review import ApprovalStore
from kairos.testing import ScriptedModel
from tests.mcp.conftest import stdio_config
from tests.server.conftest import until


async def _question(outbox: Outbox) -> dict[str, object]:
    await until(lambda: bool(outbox.questions()))
    (q,) = outbox.questions()
    return q


async def test_the_turn_goes_on_without_the_tools_and_an_approve_answer_offers_them(tmp_path: Path) -> None:
    outbox = Outbox()
    review = McpReview(ApprovalStore(tmp_path / "approvals.json"))
    async with Runtime(Agent(ScriptedModel()), SessionStore(tmp_path), components=[outbox]) as rt:
        await outbox.wait_ready()
        sid = rt.create_session("chat")
        source = McpServerSource(
            stdio_config(timeout_s=20), tmp_path, review=review, ask=outbox_review(outbox, lambda: sid)
        )
        try:
            assert await source.list_tools() == []  # not approved: withheld, and the turn did not wait
            q = await _question(outbox)
            assert str(q["text"]).startswith("MCP server bad [") and "Offer these" in str(q["text"])
            assert q["options"] == ["approve", "deny"] and q["session"] == sid
            outbox.answer(str(q["id"]), "approve")
            await until(lambda: source.review_status() == "approved")
            assert "bad__echo" in {t.name for t in await source.list_tools()}
        finally:
            await source.aclose()


async def test_deny_keeps_the_tools_withheld(tmp_path: Path) -> None:
    outbox = Outbox()
    review = McpReview(ApprovalStore(tmp_path / "approvals.json"))
    async with Runtime(Agent(ScriptedModel()), SessionStore(tmp_path), components=[outbox]) as rt:
        await outbox.wait_ready()
        source = McpServerSource(
            stdio_config(timeout_s=20), tmp_path, review=review, ask=outbox_review(outbox, rt.default_session)
        )
        try:
            await source.list_tools()
            outbox.answer(str((await _question(outbox))["id"]), "deny")
            await asyncio.sleep(0.1)
            assert source.review_status() == "needs_approval" and await source.list_tools() == []
        finally:
            await source.aclose()
