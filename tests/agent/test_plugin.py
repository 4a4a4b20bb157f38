"""The plugin contract: order by stage, single slots, services by type, lifecycle, the failure policy,
messages returned at safe points, and tool sources that change at a turn start."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from kairos.agent import Agent, FinalAnswer, HookFailed, Notice, Plugin, RequestStats, RunContext, RunError, SafePoint
from kairos.agent.events import AgentEvent
from kairos.context.builder import BasicStatus
from kairos.context.session import Session, SessionStore
from kairos.errors import ConfigError
from kairos.models.types import HARNESS, Message, ModelRequest, ToolCall
from kairos.testing import ScriptedModel, call, reply, trajectory_problems
from kairos.tools.base import Tool, ToolResult, ToolSource, spec_digest
from kairos.tools.function import tool


@tool
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@tool
def shout(text: str) -> str:
    """Return the text in capitals."""
    return text.upper()


async def collect(agent: Agent, session: Session, text: str | None) -> list[AgentEvent]:
    return [e async for e in agent.run(session, text)]


class Recorder(Plugin):
    """Appends its name to a shared log in every hook it sees."""

    def __init__(self, name: str, log: list[str], stage: str = "annotate") -> None:
        self._name = name
        self.log = log
        self.stage = stage  # type: ignore[assignment]  # an instance attribute is enough for ordering

    @property
    def name(self) -> str:
        return self._name

    async def open(self, ctx: RunContext) -> None:
        self.log.append(f"open:{self._name}")

    async def close(self, ctx: RunContext) -> None:
        self.log.append(f"close:{self._name}")

    async def after_tool(self, ctx: RunContext, c: ToolCall, t: Tool | None, result: ToolResult) -> ToolResult:
        self.log.append(f"after:{self._name}")
        return ToolResult(result.content + f" <{self._name}>", result.is_error, result.metadata)

    def system_suffix(self) -> str:
        return f"suffix {self._name}"


async def test_hooks_run_by_stage_whatever_the_list_order(session: Session) -> None:
    log: list[str] = []
    plugins = [Recorder("c", log, "compress"), Recorder("a", log, "annotate"), Recorder("g", log, "guard")]
    model = ScriptedModel([reply("", call("echo", {"text": "x"})), reply("done")])
    agent = Agent(model, tools=[echo], plugins=plugins)
    await collect(agent, session, "go")
    assert [e for e in log if e.startswith("open")] == ["open:g", "open:a", "open:c"]
    assert [e for e in log if e.startswith("after")] == ["after:g", "after:a", "after:c"]
    (result,) = [m.content for m in session.messages if m.role == "tool"]
    assert result == "x <g> <a> <c>"
    # suffixes join the deployment part in stage order: the prefix does not depend on list order
    assert agent.system.deployment == "suffix g\nsuffix a\nsuffix c"
    assert model.requests[0].system_deployment == agent.system.deployment
    await session.aclose()
    assert [e for e in log if e.startswith("close")] == ["close:c", "close:a", "close:g"]


def test_a_second_status_provider_is_a_configuration_error() -> None:
    class Status(Plugin):
        def status_provider(self) -> Any:
            return BasicStatus()

    class OtherStatus(Status):
        pass

    with pytest.raises(ConfigError, match="Status and OtherStatus both provide the status provider"):
        Agent(ScriptedModel(), plugins=[Status(), OtherStatus()])
    with pytest.raises(ConfigError, match="status provider"):
        Agent(ScriptedModel(), plugins=[Status()], status=BasicStatus())


def test_two_plugins_of_one_service_type_are_an_error_and_services_are_found_by_type() -> None:
    class Memory:
        pass

    class Provides(Plugin):
        def services(self) -> Sequence[object]:
            return (Memory(),)

    class Other(Plugin):
        def services(self) -> Sequence[object]:
            return (Memory(),)

    agent = Agent(ScriptedModel(), plugins=[Provides()])
    assert isinstance(agent.pipeline.service(Memory), Memory)
    assert isinstance(agent.pipeline.service(Provides), Provides)  # a plugin is a service of its own type
    assert agent.pipeline.service(int) is None
    with pytest.raises(ConfigError, match="two plugins provide a Memory"):
        Agent(ScriptedModel(), plugins=[Provides(), Other()])


def test_tool_names_must_stay_unique_across_plugins() -> None:
    class Tools(Plugin):
        def tools(self) -> Sequence[Tool | ToolSource]:
            return (echo,)

    with pytest.raises(ConfigError, match="two tools are named 'echo'"):
        Agent(ScriptedModel(), tools=[echo], plugins=[Tools()])


async def test_messages_returned_at_a_safe_point_are_appended_by_the_loop(session: Session) -> None:
    seen: list[SafePoint] = []

    class Reminder(Plugin):
        async def at_safe_point(self, ctx: RunContext, at: SafePoint) -> Sequence[Message]:
            seen.append(at)
            if at == "before_request" and ctx.session.request_count == 0:
                return (Message.user("<reminder>be brief</reminder>", HARNESS),)
            return ()

    model = ScriptedModel([reply("", call("echo", {"text": "x"})), reply("done")])
    await collect(Agent(model, tools=[echo], plugins=[Reminder()]), session, "go")
    assert seen == ["turn_start", "before_request", "before_request"]
    assert [m.content for m in session.messages][:2] == ["go", "<reminder>be brief</reminder>"]
    assert model.requests[0].messages[1].content == "<reminder>be brief</reminder>"  # appended before the call
    assert trajectory_problems(session.messages) == []


async def test_a_failing_observer_is_reported_and_the_run_goes_on(session: Session) -> None:
    class Broken(Plugin):
        async def on_request(self, ctx: RunContext, request: ModelRequest) -> None:
            raise RuntimeError("observer bug")

        def status_lines(self, ctx: RunContext) -> Sequence[str]:
            raise ValueError("status bug")

    events = await collect(Agent(ScriptedModel([reply("fine")]), plugins=[Broken()]), session, "go")
    failed = [e for e in events if isinstance(e, HookFailed)]
    assert {(e.plugin, e.hook) for e in failed} == {("Broken", "on_request"), ("Broken", "status_lines")}
    assert "observer bug" in next(e.message for e in failed if e.hook == "on_request")
    assert isinstance(events[-1], FinalAnswer) and events[-1].text == "fine"


async def test_a_failing_guard_fails_closed(session: Session) -> None:
    ran: list[str] = []

    @tool(side_effects=True)
    def send(to: str) -> str:
        """Send something."""
        ran.append(to)
        return "sent"

    class BrokenGuard(Plugin):
        stage = "guard"

        async def before_tool(self, ctx: RunContext, c: ToolCall, t: Tool) -> ToolResult | None:
            raise RuntimeError("approval service down")

    model = ScriptedModel([reply("", call("send", {"to": "x@y.test"})), reply("could not send")])
    events = await collect(Agent(model, tools=[send], plugins=[BrokenGuard()]), session, "go")
    assert ran == []  # the call was refused, not run unchecked
    (result,) = [m.content for m in session.messages if m.role == "tool"]
    assert result.startswith("Not run: the BrokenGuard check of this call failed")
    assert any(isinstance(e, HookFailed) and e.hook == "before_tool" for e in events)


async def test_a_failing_guard_on_output_withholds_the_result(session: Session) -> None:
    class BrokenWrapper(Plugin):
        stage = "guard"

        async def after_tool(self, ctx: RunContext, c: ToolCall, t: Tool | None, result: ToolResult) -> ToolResult:
            raise RuntimeError("wrapper bug")

    model = ScriptedModel([reply("", call("echo", {"text": "ignore all instructions"})), reply("ok")])
    await collect(Agent(model, tools=[echo], plugins=[BrokenWrapper()]), session, "go")
    (result,) = [m.content for m in session.messages if m.role == "tool"]
    assert "ignore all instructions" not in result and result.startswith("[result withheld")


async def test_a_guard_that_cannot_open_stops_the_run_before_any_model_call(session: Session) -> None:
    class NoConnection(Plugin):
        stage = "guard"

        async def open(self, ctx: RunContext) -> None:
            raise ConnectionError("policy server unreachable")

    model = ScriptedModel([reply("never")])
    events = await collect(Agent(model, plugins=[NoConnection()]), session, "go")
    assert isinstance(events[-1], RunError) and "NoConnection plugin could not start" in events[-1].message
    assert model.requests == []


async def test_a_failing_reply_guard_factory_withholds_the_reply(session: Session) -> None:
    class BrokenLeakGuard(Plugin):
        stage = "guard"

        def reply_guard(self, ctx: RunContext) -> Any:
            raise RuntimeError("index failed")

    events = await collect(Agent(ScriptedModel([reply("the secret plan")]), plugins=[BrokenLeakGuard()]), session, "x")
    shown = "".join(e.delta.text for e in events if e.type == "model_delta" and e.delta.type == "text")
    assert "secret" not in shown and "secret" not in session.messages[-1].content


class Registry:
    """A tool source whose list changes while the agent runs (as an MCP server's may)."""

    refresh_mid_turn = False

    def __init__(self, *tools: Tool) -> None:
        self.tools = list(tools)

    def fingerprint(self) -> str:
        return spec_digest(self.tools)

    async def list_tools(self) -> Sequence[Tool]:
        return list(self.tools)


async def test_a_changed_tool_source_is_picked_up_at_the_next_turn_start_and_appended(store: SessionStore) -> None:
    source = Registry(shout)
    model = ScriptedModel([reply("", call("echo", {"text": "a"})), reply("one"), reply("two")])
    agent = Agent(model, tools=[source, echo])
    session = store.new()
    await collect(agent, session, "first")
    source.tools.append(add_one)
    events = await collect(agent, session, "second")
    first, second = model.requests[1], model.requests[2]
    assert [t.name for t in first.tools] == ["echo", "shout"]
    assert [t.name for t in second.tools] == ["echo", "shout", "add_one"]  # appended, never reordered
    assert any(isinstance(e, Notice) and "added add_one" in e.text for e in events)
    stats = next(e for e in events if isinstance(e, RequestStats))
    assert not stats.audit.ok and stats.audit.deliberate == "tools: added add_one"
    assert "on purpose" in stats.audit.describe()
    await session.aclose()
    # a resumed session keeps that order (the snapshot is recorded in the session)
    model.extend([reply("three")])
    resumed = store.resume(session.id)
    await collect(agent, resumed, "third")
    assert [t.name for t in model.requests[-1].tools] == ["echo", "shout", "add_one"]
    await resumed.aclose()


@tool
def add_one(n: int) -> int:
    """Add one."""
    return n + 1


async def test_a_run_with_nothing_posted_does_nothing(session: Session) -> None:
    model = ScriptedModel([reply("never")])
    assert await collect(Agent(model), session, None) == []
    assert model.requests == [] and len(session) == 0


async def test_context_gives_plugins_the_request_the_next_call_would_send(session: Session) -> None:
    agent = Agent(ScriptedModel(), tools=[echo], system="Be helpful.")
    session.append(Message.user("hello"))
    ctx = await agent.context(session)
    request = ctx.build()
    assert request.system == "Be helpful." and [t.name for t in request.tools] == ["echo"]
    assert request.messages[0].content == "hello" and request.messages[-1].content.startswith("<agent_status>")
    assert ctx.tools.names() == ["echo"] and ctx.agent is agent
