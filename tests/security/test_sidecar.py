"""The sidecar classifier: starts mid-stream, sees only name and arguments, blocks, stops after 3 no's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kairos.agent import Agent
from kairos.context.session import Session
from kairos.models.types import (
    Message,
    ModelRequest,
    ModelResponse,
    ReasoningPolicy,
    ResponseDone,
    StreamEvent,
    SystemPrompt,
    TextDelta,
    ToolCall,
    ToolCallDelta,
)
from kairos.plugins.defences import InjectionDefences
from kairos.security.gate import ReviewGate
from kairos.security.reviewer import Review, ReviewConfig
from kairos.security.sidecar import ModelClassifier, Sidecar, SidecarConfig
from kairos.testing import ScriptedModel, call, reply
from kairos.tools.function import tool

RAN: list[str] = []


@tool(side_effects=True)
def shell(command: str) -> str:
    """Run a command."""
    RAN.append(command)
    return f"ran {command}"


@tool(read_only=True)
def look(path: str) -> str:
    """Read something."""
    return f"contents of {path}"


class Recorder:
    """A classifier double: answers from a list (default yes), records calls, can be gated."""

    def __init__(self, *answers: bool) -> None:
        self.answers = list(answers)
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self.called = asyncio.Event()

    async def classify(self, tool: str, arguments: dict[str, Any]) -> Review:
        self.seen.append((tool, arguments))
        self.called.set()
        ok = self.answers.pop(0) if self.answers else True
        return Review(ok, "low" if ok else "high", "ok" if ok else "looks destructive", "sidecar")


def gate_with(classifier: Any, **sidecar: Any) -> ReviewGate:
    config = ReviewConfig.model_validate({"sidecar": {"enabled": True, **sidecar}})
    return ReviewGate(config, classifier=classifier)


def agent_with(model: Any, gate: ReviewGate) -> Agent:
    assert gate.sidecar is not None
    defences = InjectionDefences(review=gate)
    return Agent(gate.sidecar.wrap(model), tools=[shell, look], system=SystemPrompt("t", ""), plugins=[defences])


def tool_outputs(session: Session) -> list[str]:
    return [m.content for m in session.messages if m.role == "tool"]


class WaitsForClassifier:
    """Streams call 0, then holds the rest of the reply until the classifier has been called.

    Were classification to start only after the reply (or at execution), this would never finish.
    """

    name = "held"
    context_window = 8192
    reasoning_policy = ReasoningPolicy.KEEP_ALL

    def __init__(self, classifier: Recorder) -> None:
        self.classifier = classifier
        self.turn = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.turn += 1
        if self.turn > 1:
            yield TextDelta("done")
            yield ResponseDone(ModelResponse(Message.assistant("done")))
            return
        yield ToolCallDelta(0, "c1", "shell", '{"command": ')
        yield ToolCallDelta(0, None, None, '"make test"}')
        await asyncio.wait_for(self.classifier.called.wait(), timeout=30)
        yield TextDelta("and more text the classifier never sees")
        calls = (ToolCall("c1", "shell", '{"command": "make test"}'),)
        yield ResponseDone(ModelResponse(Message.assistant("and more text the classifier never sees", calls)))

    def count_tokens(self, request: ModelRequest) -> int:
        return 1


async def test_classification_starts_while_the_reply_is_still_streaming(session: Session) -> None:
    classifier = Recorder()
    gate = gate_with(classifier)
    _ = [e async for e in agent_with(WaitsForClassifier(classifier), gate).run(session, "run the tests")]
    assert gate.sidecar is not None and gate.sidecar.started_in_stream == 1
    assert classifier.seen == [("shell", {"command": "make test"})]  # once: the early start was reused
    assert tool_outputs(session) == ["ran make test"]


async def test_execution_waits_for_the_classifier_and_a_no_refuses(session: Session) -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    class Slow(Recorder):
        async def classify(self, tool: str, arguments: dict[str, Any]) -> Review:
            entered.set()
            await asyncio.wait_for(release.wait(), timeout=30)
            return await super().classify(tool, arguments)

    classifier = Slow(False)
    model = ScriptedModel([reply("", call("shell", {"command": "rm -rf ~"})), reply("ok")])
    RAN.clear()
    run = asyncio.create_task(_drain(agent_with(model, gate_with(classifier)), session, "clean up"))
    await asyncio.wait_for(entered.wait(), timeout=30)
    assert RAN == [] and not run.done()  # the call waits for the verdict
    release.set()
    await asyncio.wait_for(run, timeout=30)
    assert RAN == []
    assert "the sidecar rejected 'shell' (risk high): looks destructive" in tool_outputs(session)[0]


async def _drain(agent: Agent, session: Session, text: str) -> None:
    _ = [e async for e in agent.run(session, text)]


async def test_three_rejections_in_a_row_stop_the_agent_until_the_user_speaks(session: Session) -> None:
    classifier = Recorder(False, False, False, False)
    calls = [reply("", call("shell", {"command": f"try {i}"})) for i in range(4)]
    model = ScriptedModel([*calls, reply("I'll ask")])
    agent = agent_with(model, gate_with(classifier))
    RAN.clear()
    await _drain(agent, session, "do it")
    outs = tool_outputs(session)
    # the 4th call's classification starts mid-stream (the stream knows no session) but is not waited for
    assert [c for _, c in classifier.seen][:3] == [{"command": f"try {i}"} for i in range(3)]
    assert all("rejected 'shell'" in o for o in outs[:3])
    assert "rejected 3 calls in a row" in outs[3] and "ask how to proceed" in outs[3] and RAN == []
    model.extend([reply("", call("shell", {"command": "try 4"})), reply("done")])
    await _drain(agent, session, "yes, go ahead with try 4")
    assert RAN == ["try 4"] and classifier.seen[-1] == ("shell", {"command": "try 4"})


async def test_read_only_tools_are_not_classified(session: Session) -> None:
    classifier = Recorder(False)
    model = ScriptedModel([reply("", call("look", {"path": "a"})), reply("ok")])
    await _drain(agent_with(model, gate_with(classifier)), session, "look")
    assert classifier.seen == [] and tool_outputs(session) == ["contents of a"]


async def test_the_model_classifier_sees_only_the_name_and_arguments() -> None:
    judge = ScriptedModel([reply("", call("verdict", {"approved": True, "risk": "low", "reason": "ls is fine"}))])
    review = await ModelClassifier(judge).classify("bash", {"command": "ls -la"})
    assert (review.approved, review.by) == (True, "sidecar")
    [request] = judge.requests
    assert [m.role for m in request.messages] == ["user"]
    assert request.messages[0].content == 'tool: bash\narguments: {"command": "ls -la"}'


@pytest.mark.parametrize("step", [RuntimeError("boom"), reply("looks fine to me")], ids=["raises", "junk"])
async def test_the_model_classifier_fails_closed(step: Any) -> None:
    review = await ModelClassifier(ScriptedModel([step])).classify("bash", {"command": "ls"})
    assert not review.approved and "sidecar failed" in review.reason


async def test_a_classifier_that_raises_is_a_rejection() -> None:
    class Broken:
        async def classify(self, tool: str, arguments: dict[str, Any]) -> Review:
            raise ValueError("bad state")

    sidecar = Sidecar(Broken(), SidecarConfig(enabled=True))
    review = await sidecar.decide("s", "bash", {"command": "ls"})
    assert not review.approved and "ValueError: bad state" in review.reason


async def test_unused_early_starts_are_bounded() -> None:
    sidecar = Sidecar(Recorder(), SidecarConfig(enabled=True))
    tasks = [sidecar.start("bash", {"command": f"echo {i}"}) for i in range(70)]
    await asyncio.gather(*tasks, return_exceptions=True)
    assert sum(t.cancelled() for t in tasks) == 6 and len(sidecar._pending) == 64


def test_build_agent_wraps_the_model_only_when_the_sidecar_is_on(workspace: Any) -> None:
    from kairos.app import build_agent
    from kairos.config import KairosConfig
    from kairos.security.sidecar import WatchedModel

    model = ScriptedModel()
    assert build_agent(model, workspace, KairosConfig()).model is model
    config = KairosConfig.model_validate({"review": {"sidecar": {"enabled": True, "model": "local-small"}}})
    watched = build_agent(model, workspace, config).model
    assert isinstance(watched, WatchedModel) and watched.inner is model and watched.name == "scripted"
    assert watched.requests is model.requests  # anything else is the inner model's
