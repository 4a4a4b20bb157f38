"""A tool's images reach the model in its tool message, are stored with the trajectory, come back on resume
byte for byte (the cached prefix holds), and survive the hooks that rewrite a result's text."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from kairos.agent import Agent
from kairos.agent.events import RequestStats
from kairos.context.session import SessionStore
from kairos.models.types import Image, SystemPrompt
from kairos.plugins.defences import InjectionDefences
from kairos.testing import ScriptedModel, call, reply, trajectory_problems
from kairos.tools.base import ToolResult
from kairos.tools.executor import cap_output
from kairos.tools.function import tool

SHOT = Image.from_bytes(b"\x89PNG\r\n\x1a\n fake pixels")


@tool(external=True)
def snap(label: str) -> ToolResult:
    """Take a picture.

    Args:
        label: what it shows.
    """
    return ToolResult(f"A picture of {label}.", images=(SHOT,))


def agent(model: ScriptedModel) -> Agent:
    return Agent(model, tools=[snap], system=SystemPrompt("You are a test agent.", ""), plugins=[InjectionDefences()])


async def test_the_model_sees_the_image_and_a_resumed_session_sends_it_identically(workspace: Path) -> None:
    store = SessionStore(workspace)
    session = store.new()
    model = ScriptedModel([reply("", call("snap", {"label": "a cat"})), reply("A cat.")])
    events = [e async for e in agent(model).run(session, "look")]
    assert all(e.audit.ok for e in events if isinstance(e, RequestStats))
    result = next(m for m in model.requests[1].messages if m.role == "tool")
    assert result.images == (SHOT,) and "A picture of a cat." in result.content
    assert "<external_content" in result.content  # the defences rewrote the text and kept the image
    sid = session.id
    await session.aclose()
    store.close()

    store = SessionStore(workspace)
    resumed = store.resume(sid)
    stored = next(m for m in resumed.messages if m.role == "tool")
    assert stored == result and stored.serialized() == result.serialized()
    model.extend([reply("Still a cat.")])
    events = [e async for e in agent(model).run(resumed, "again")]
    assert all(e.audit.ok for e in events if isinstance(e, RequestStats))
    before, after = model.requests[1], model.requests[2]
    prefix = [m.serialized() for m in before.messages[: before.stable_prefix_len]]
    assert [m.serialized() for m in after.messages[: len(prefix)]] == prefix
    assert trajectory_problems(resumed.messages) == []
    await resumed.aclose()
    store.close()


async def test_a_session_stored_before_images_resumes(workspace: Path) -> None:
    store = SessionStore(workspace)
    session = store.new()
    sid = session.id
    await session.aclose()
    store.close()
    with sqlite3.connect(workspace / ".kairos" / "kairos.db") as db:  # records as an older kairos wrote them
        db.executemany(
            "INSERT INTO messages (session_id, seq, created_at, record) VALUES (?, ?, 0, ?)",
            [
                (sid, 0, '{"role": "user", "content": "look"}'),
                (sid, 1, '{"role": "assistant", "content": "", "tool_calls": [["c1", "snap", "{}"]]}'),
                (sid, 2, '{"role": "tool", "content": "A picture.", "tool_call_id": "c1", "name": "snap"}'),
                (sid, 3, '{"role": "assistant", "content": "Done."}'),
            ],
        )
    store = SessionStore(workspace)
    resumed = store.resume(sid)
    assert [m.images for m in resumed.messages] == [()] * 4
    model = ScriptedModel([reply("Yes.")])
    _ = [e async for e in agent(model).run(resumed, "more?")]
    assert model.requests[0].messages[2].content == "A picture."
    await resumed.aclose()
    store.close()


def test_a_cut_result_keeps_its_images() -> None:
    cut = cap_output(ToolResult("x" * 50, images=(SHOT,)), 10)
    assert cut.content.startswith("x" * 10) and cut.images == (SHOT,)
