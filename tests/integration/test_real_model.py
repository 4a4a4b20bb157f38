"""End-to-end on the real bundled 1.5B model: tool use and cross-turn KV-cache reuse."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kairos.agent.events import AgentEvent, FinalAnswer, RequestStats, ToolCallFinished
from kairos.app import build_agent
from kairos.config import KairosConfig
from kairos.context.session import Session, SessionStore
from kairos.models.local import LocalModel

pytestmark = pytest.mark.model
FIXED = datetime(2026, 3, 14, 15, 9, tzinfo=UTC)
# The product's agent with a simulated clock that stands still: same prompt bytes every run.
CONFIG = KairosConfig.model_validate({"status_bar": {"clock_start": FIXED, "clock_step_s": 0}})


@pytest.fixture(scope="module")
def model() -> Iterator[LocalModel]:
    m = LocalModel("local", n_ctx=8192)
    m.load()
    yield m
    m.close()


async def run_turn(agent: object, session: Session, text: str) -> list[AgentEvent]:
    return [e async for e in agent.run(session, text)]  # type: ignore[attr-defined]


async def test_question_needing_two_tools_is_answered(model: LocalModel, workspace: Path, store: SessionStore) -> None:
    (workspace / "data").mkdir()
    (workspace / "data" / "code.txt").write_text("The secret code is KX-4471.\n")
    agent = build_agent(model, workspace, CONFIG)
    session = store.new()
    try:
        events = await run_turn(
            agent,
            session,
            "What time is it now in Tokyo, and what is the secret code written in the file data/code.txt?",
        )
    finally:
        await session.aclose()
    called = {e.call.name for e in events if isinstance(e, ToolCallFinished)}
    assert "current_time" in called
    assert called & {"read_file", "bash", "grep"}
    final = [e for e in events if isinstance(e, FinalAnswer)][-1]
    assert final.stop_reason == "answer"
    assert "KX-4471" in final.text
    assert "00:09" in final.text or "12:09" in final.text  # 15:09 UTC is 00:09 the next day in Tokyo


async def test_second_turn_reuses_the_kv_cache(model: LocalModel, workspace: Path, store: SessionStore) -> None:
    agent = build_agent(model, workspace, CONFIG)
    session = store.new()
    try:
        await run_turn(agent, session, "What time is it in Tokyo?")
        second = await run_turn(agent, session, "And in Paris?")
    finally:
        await session.aclose()
    stats = [e for e in second if isinstance(e, RequestStats)]
    first_of_turn = stats[0]
    assert first_of_turn.audit.ok
    u = first_of_turn.usage
    assert u.cached_prompt_tokens >= 0.9 * u.prompt_tokens, (u.cached_prompt_tokens, u.prompt_tokens)
