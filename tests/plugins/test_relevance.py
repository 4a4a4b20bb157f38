"""The tool-relevance gate on a scripted model that also scores choices."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.models.base import ChoiceLogprobs
from kairos.models.types import HARNESS, Message, ModelRequest
from kairos.plugins.relevance import ToolRelevanceGate, p_first
from kairos.testing import ScriptedModel, call, reply
from kairos.tools.builtins.clock import current_time
from kairos.tools.toolsets.config import RelevanceConfig


class ScoringModel(ScriptedModel):
    """Replies from a script; scores the call/answer branch with a fixed P(call)."""

    def __init__(self, replies: Sequence[object], p_call: float) -> None:
        super().__init__(list(replies))  # type: ignore[arg-type]
        self.p_call = p_call
        self.scored: list[tuple[ModelRequest, str | None]] = []

    async def choice_logprobs(
        self, request: ModelRequest, choices: Sequence[str], *, reply_prefix: str | None = None
    ) -> ChoiceLogprobs:
        self.scored.append((request, reply_prefix))
        return ChoiceLogprobs({"tool": math.log(self.p_call), "name": math.log(1 - self.p_call)})


@pytest.mark.parametrize(("p_call", "choice"), [(0.2, "none"), (0.8, "auto")])
async def test_the_first_reply_of_a_turn_is_gated_by_the_models_own_call_probability(
    store: SessionStore, p_call: float, choice: str
) -> None:
    model = ScoringModel([reply("", call("current_time", {})), reply("It is noon.")], p_call)
    gate = ToolRelevanceGate(RelevanceConfig(enabled=True, min_p_call=0.5))
    agent = Agent(model, tools=[current_time], plugins=[gate])
    session = store.new()
    _ = [e async for e in agent.run(session, "What time is it?")]
    assert model.requests[0].tool_choice == choice
    assert model.requests[1].tool_choice == "auto"  # after a tool result: not gated
    (scored, prefix) = model.scored[0]
    assert len(model.scored) == 1 and prefix == '{"' and scored.messages == model.requests[0].messages
    assert gate.scored == 1 and gate.limited == (choice == "none")
    await session.aclose()


async def test_harness_notes_after_the_user_message_still_count_as_the_turn_start() -> None:
    from kairos.plugins.relevance import _turn_start

    tools = (current_time.spec,)
    user = Message.user("hi")
    assert _turn_start(ModelRequest("s", "", tools, (user, Message("user", "[cards]", origin=HARNESS))))
    after_tool = (user, Message.assistant("", (call("current_time", {}),)), Message.tool("c", "x"))
    assert not _turn_start(ModelRequest("s", "", tools, after_tool))
    assert not _turn_start(ModelRequest("s", "", tools, ()))


async def test_no_tools_or_a_model_that_cannot_score_is_left_alone(store: SessionStore) -> None:
    gate = ToolRelevanceGate()
    plain = ScriptedModel([reply("hello")])
    agent = Agent(plain, tools=[current_time], plugins=[gate])
    session = store.new()
    _ = [e async for e in agent.run(session, "hi")]
    assert plain.requests[0].tool_choice == "auto" and gate.last_p_call is None
    await session.aclose()


def test_p_first_renormalises_over_the_two_branches() -> None:
    assert p_first(math.log(0.3), math.log(0.1)) == pytest.approx(0.75)
    assert p_first(-math.inf, -math.inf) == 0.5 and p_first(0.0, -math.inf) == 1.0
