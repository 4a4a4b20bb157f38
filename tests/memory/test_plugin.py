"""The memory plugin in the agent loop: cards once at turn start, a byte-stable prefix, memory_search, extraction."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.knowledge import HashEmbedder
from kairos.memory import UserMemory
from kairos.models.types import Message, ModelRequest, StreamEvent, SystemPrompt
from kairos.plugins.memory import MEMORY_ORIGIN, MemoryPlugin
from kairos.testing import ScriptedModel, call, reply, trajectory_problems
from tests.memory.conftest import AT, op, ops

SYSTEM = SystemPrompt("You are a test agent.")


async def seeded(state: Path) -> UserMemory:
    model = ScriptedModel([ops(
        op("Prefers window seats", [0], category="preference", importance=0.6),
        op("Vegetarian", [0], category="constraint", importance=0.9),
    )])  # fmt: skip
    mem = UserMemory.open(state, HashEmbedder(), model, user="alice")
    await mem.ingest_session([Message.user("I like window seats and I'm vegetarian.")], session_id="old", at=AT)
    return mem


def quiet(mem: UserMemory) -> MemoryPlugin:
    return MemoryPlugin(mem, extract_after_session=False)


async def run(agent: Agent, session: object, text: str) -> None:
    async for _ in agent.run(session, text):  # type: ignore[arg-type]
        pass


async def test_cards_are_appended_once_and_the_prefix_is_unchanged(workspace: Path) -> None:
    with_mem = await seeded(workspace / ".kairos")
    empty = UserMemory.open(workspace / "other", HashEmbedder(), None, user="alice")
    requests = []
    try:
        for mem in (with_mem, empty):
            model = ScriptedModel([reply("ok"), reply("fine")])
            agent = Agent(model, system=SYSTEM, plugins=[MemoryPlugin(mem, extract_after_session=False)])
            store = SessionStore(workspace / f"sessions-{mem is empty}")
            session = store.new()
            await run(agent, session, "Book me a flight to Oslo")
            await run(agent, session, "and a hotel")
            cards = [m for m in session.messages if m.origin == MEMORY_ORIGIN]
            if mem is with_mem:
                assert len(cards) == 1  # once per session, not once per turn
                assert session.messages[0].from_user and session.messages[1] == cards[0]  # after the first message
                assert "Vegetarian" in cards[0].content and "window seats" in cards[0].content
            else:
                assert cards == []
            requests.append(model.requests[0])
            await session.aclose()
            store.close()
        a, b = requests
        assert (a.system_static, a.system_deployment, a.tools) == (b.system_static, b.system_deployment, b.tools)
    finally:
        with_mem.close()
        empty.close()


async def test_a_resumed_session_does_not_get_the_cards_again(workspace: Path) -> None:
    mem = await seeded(workspace / ".kairos")
    store = SessionStore(workspace)
    try:
        session = store.new()
        agent = Agent(ScriptedModel([reply("ok")]), system=SYSTEM, plugins=[quiet(mem)])
        await run(agent, session, "hi")
        sid = session.id
        await session.aclose()
        resumed = store.resume(sid)
        agent = Agent(ScriptedModel([reply("ok")]), system=SYSTEM, plugins=[quiet(mem)])
        await run(agent, resumed, "again")
        assert len([m for m in resumed.messages if m.origin == MEMORY_ORIGIN]) == 1
        await resumed.aclose()
    finally:
        store.close()
        mem.close()


async def test_memory_search_through_the_agent_loop(workspace: Path) -> None:
    mem = await seeded(workspace / ".kairos")
    model = ScriptedModel([reply("", call("memory_search", {"query": "vegetarian meal", "k": 3})), reply("Noted.")])
    plugin = MemoryPlugin(mem, max_cards=0, extract_after_session=False)
    store = SessionStore(workspace)
    session = store.new()
    try:
        await run(Agent(model, system=SYSTEM, plugins=[plugin]), session, "What do I eat?")
        result = next(m for m in session.messages if m.role == "tool")
        data = json.loads(result.content)
        assert data["results"][0]["type"] == "memory" and "Vegetarian" in data["results"][0]["text"]
        assert any(r["type"] == "conversation" and r["session"] == "old" and r["date"] == "2026-03-01"
                   for r in data["results"])  # fmt: skip
        tool = next(t for t in plugin.tools() if getattr(t, "name", "") == "memory_search")
        assert tool.external and tool.read_only  # type: ignore[union-attr]
        assert trajectory_problems(session.messages) == []
    finally:
        await session.aclose()
        store.close()
        mem.close()


async def test_closing_a_session_saves_its_memory_in_the_background(workspace: Path) -> None:
    model = ScriptedModel([reply("Sure, noted."), ops(op("Has a dog called Rex", [0], category="relationship"))])
    mem = UserMemory.open(workspace / ".kairos", HashEmbedder(), model, user="alice")
    plugin = MemoryPlugin(mem, settle_s=0)
    store = SessionStore(workspace)
    session = store.new()
    try:
        await run(Agent(model, system=SYSTEM, plugins=[plugin]), session, "My dog is called Rex.")
        await session.aclose()  # returns without waiting for the extractor
        await asyncio.wait_for(plugin.until_saved(), 30)
        assert [c.content for c in mem.current()] == ["Has a dog called Rex"]
        assert mem.current()[0].provenance.session_id == session.id
        assert [t.name for t in model.requests[-1].tools] == ["save_memories"]
    finally:
        await plugin.stop()
        store.close()
        mem.close()


async def test_finish_memory_does_not_wait_and_the_next_process_saves_while_idle(workspace: Path) -> None:
    from kairos.app import finish_memory

    model = ScriptedModel([reply("ok")])
    mem = UserMemory.open(workspace / ".kairos", HashEmbedder(), model, user="alice")
    agent = Agent(model, system=SYSTEM, plugins=[MemoryPlugin(mem)])
    store = SessionStore(workspace)
    first = store.new()
    await run(agent, first, "I play the cello.")
    await first.aclose()
    assert await finish_memory(agent) == 1  # at once: one session left in the ledger, no extraction started
    assert len(model.requests) == 1
    store.close()

    model2 = ScriptedModel([reply("Hi!"), ops(op("Plays the cello", [0]))])
    mem2 = UserMemory.open(workspace / ".kairos", HashEmbedder(), model2, user="alice")
    plugin2 = MemoryPlugin(mem2, settle_s=0)
    store2 = SessionStore(workspace)
    second = store2.new()
    try:
        await run(Agent(model2, system=SYSTEM, plugins=[plugin2]), second, "Hello")  # nothing to remember here
        await asyncio.wait_for(plugin2.until_saved(), 30)  # the first process's session, while this one is idle
        assert [(c.content, c.provenance.session_id) for c in mem2.current()] == [("Plays the cello", first.id)]
        assert "I play the cello." in model2.requests[1].messages[-1].content
        await second.aclose()
    finally:
        await plugin2.stop()
        store2.close()
        mem2.close()


class HangingExtractor(ScriptedModel):
    """Answers the chat from its script; the first ``hang`` extraction requests hang until cancelled."""

    def __init__(self, *steps: object, hang: int = 1_000) -> None:
        super().__init__(list(steps))  # type: ignore[arg-type]
        self.hang = hang
        self.extracting = asyncio.Event()
        self.cancelled = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        if request.tools and request.tools[0].name == "save_memories" and self.hang > 0:
            self.hang -= 1
            self.extracting.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        async for event in super().stream(request):
            yield event


async def test_stopping_while_memory_is_saved_cancels_it_and_keeps_it_for_later(workspace: Path) -> None:
    from kairos.app import finish_memory, memory_pending

    model = HangingExtractor(reply("ok"))
    mem = UserMemory.open(workspace / ".kairos", HashEmbedder(), model, user="alice")
    agent = Agent(model, system=SYSTEM, plugins=[MemoryPlugin(mem, settle_s=0)])
    store = SessionStore(workspace)
    session = store.new()
    await run(agent, session, "I play the cello.")
    await session.aclose()
    await asyncio.wait_for(model.extracting.wait(), 30)
    assert memory_pending(agent) == 1
    assert await asyncio.wait_for(finish_memory(agent), 30) == 1
    assert model.cancelled == 1
    again = UserMemory.open(workspace / ".kairos", HashEmbedder(), None, user="alice")  # closed cleanly: reopens
    try:
        assert again.current() == [] and [p.session_id for p in again.unfinished_ingests()] == [session.id]
        resumed = store.resume(session.id)  # the session itself is complete
        assert [m.role for m in resumed.messages] == ["user", "assistant"]
        await resumed.aclose()
    finally:
        again.close()
        store.close()


async def test_a_chat_is_saved_after_each_answer_and_a_new_message_comes_first(workspace: Path) -> None:
    model = HangingExtractor(
        reply("Nice!"), reply("Got it."), ops(op("Plays the cello", [0])), ops(op("Has a dog called Rex", [2])),
        hang=1,
    )  # fmt: skip
    mem = UserMemory.open(workspace / ".kairos", HashEmbedder(), model, user="alice")
    plugin = MemoryPlugin(mem, settle_s=0)
    agent = Agent(model, system=SYSTEM, plugins=[plugin])
    store = SessionStore(workspace)
    chat = store.new()
    try:
        await run(agent, chat, "I play the cello.")
        await asyncio.wait_for(model.extracting.wait(), 30)  # saving the open session after the answer
        await run(agent, chat, "My dog is called Rex.")  # the user typed again: the answer is not held back
        assert [m.content for m in chat.messages if m.role == "assistant"] == ["Nice!", "Got it."]
        await asyncio.wait_for(plugin.until_saved(), 30)  # both parts, while idle again; the chat is still open
        assert model.cancelled == 1  # the save that was running when the user spoke stepped aside, then resumed
        assert sorted(c.content for c in mem.current()) == ["Has a dog called Rex", "Plays the cello"]
        assert "I play the cello" not in model.requests[-1].messages[-1].content.split("Conversation:")[1]
    finally:
        await plugin.stop()
        await chat.aclose()
        store.close()
        mem.close()


async def test_past_conversation_rounds_relevant_to_the_request_come_with_the_cards(workspace: Path) -> None:
    mem = UserMemory.open(workspace / ".kairos", HashEmbedder(), None, user="alice")  # no extractor: no cards
    try:
        said = [Message.user("Which account number did you open for me?"),
                Message.assistant("Your new checking account number is 7700123456."),
                Message.user("Thanks. Also, the weather is lovely today.")]  # fmt: skip
        await mem.ingest_session(said, session_id="bank", at=AT)
        model = ScriptedModel([reply("It is 7700123456.")])
        agent = Agent(model, system=SYSTEM, plugins=[MemoryPlugin(mem, recall=1, extract_after_session=False)])
        store = SessionStore(workspace / "sessions")
        session = store.new()
        await run(agent, session, "What was my checking account number again?")
        (added,) = [m for m in session.messages if m.origin == MEMORY_ORIGIN]
        assert "7700123456" in added.content and "session bank" in added.content and "weather" not in added.content
        await session.aclose()
        store.close()
    finally:
        mem.close()


async def test_an_unfinished_ingest_whose_session_is_gone_is_dropped_with_a_warning(
    workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from kairos.app import finish_memory

    model = ScriptedModel([reply("ok"), ops(op("Plays the cello", [0]))])
    mem = UserMemory.open(workspace / ".kairos", HashEmbedder(), model, user="alice")
    mem.store.expect_ingest("alice", "ghost", "0" * 32, 4, AT.timestamp())  # its session was deleted since
    plugin = MemoryPlugin(mem, settle_s=0)
    agent = Agent(model, system=SYSTEM, plugins=[plugin])
    store = SessionStore(workspace)
    session = store.new()
    try:
        with caplog.at_level("WARNING", logger="kairos.memory"):
            await run(agent, session, "I play the cello.")
            await session.aclose()
            await asyncio.wait_for(plugin.until_saved(), 30)
            await finish_memory(agent)
        assert "session ghost is not ingested (its session cannot be read" in caplog.text
        again = UserMemory.open(workspace / ".kairos", HashEmbedder(), None, user="alice")
        try:
            assert [c.content for c in again.current()] == ["Plays the cello"] and again.unfinished_ingests() == []
        finally:
            again.close()
    finally:
        store.close()
