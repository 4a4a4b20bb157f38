"""End-to-end on the real bundled 1.5B model: tool use, cross-turn KV-cache reuse, reranking from logits."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from kairos.agent.events import AgentEvent, FinalAnswer, RequestStats, ToolCallFinished
from kairos.app import build_agent
from kairos.config import KairosConfig
from kairos.context.session import Session, SessionStore
from kairos.knowledge.rerank import LLMReranker
from kairos.models.local import LocalModel

pytestmark = pytest.mark.model
FIXED = datetime(2026, 3, 14, 15, 9, tzinfo=UTC)
# The product's agent with a simulated clock that stands still: same prompt bytes every run.
CONFIG = KairosConfig.model_validate({"status_bar": {"clock_start": FIXED, "clock_step_s": 0}})


async def run_turn(agent: object, session: Session, text: str) -> list[AgentEvent]:
    return [e async for e in agent.run(session, text)]  # type: ignore[attr-defined]


async def test_question_needing_two_tools_is_answered(
    bundled_model: LocalModel, workspace: Path, store: SessionStore
) -> None:
    (workspace / "data").mkdir()
    (workspace / "data" / "code.txt").write_text("The secret code is KX-4471.\n")
    agent = build_agent(bundled_model, workspace, CONFIG)
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


async def test_second_turn_reuses_the_kv_cache(bundled_model: LocalModel, workspace: Path, store: SessionStore) -> None:
    agent = build_agent(bundled_model, workspace, CONFIG)
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


async def test_logit_reranker_scores_a_relevant_passage_above_an_irrelevant_one(bundled_model: LocalModel) -> None:
    query = "How far does a greyhound run in a typical race?"
    relevant = "Most greyhound races in Britain are run over 480 metres, a little under a third of a mile."
    irrelevant = "Pottery classes start on Monday evenings; bring an apron, the kiln room gets hot."
    reranker = LLMReranker(bundled_model)
    scores = await reranker.score(query, [relevant, irrelevant])
    stats = reranker.last_stats
    print(
        f"\nlogit rerank: {stats.seconds / stats.judged:.2f} s per candidate, scores {scores}, "
        f"{stats.cached_prompt_tokens}/{stats.prompt_tokens} prompt tokens from cache"
    )
    assert scores[0] is not None and scores[1] is not None
    assert scores[0] > 0.5 > scores[1]
    # one more candidate for the same query pays only for its passage and the closing line
    other = "Comet the greyhound sleeps on the sofa all afternoon."
    result = await bundled_model.choice_logprobs(reranker.choice_request(query, other), ("yes", "no"))
    print(f"one more candidate: {result.usage.total_s:.2f} s, {result.usage.new_prompt_tokens} new prompt tokens")
    assert result.usage.new_prompt_tokens < result.usage.prompt_tokens / 2
