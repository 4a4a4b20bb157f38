"""Safety-relevant memories reach the status message when the request touches them (issue 24)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.knowledge import HashEmbedder
from kairos.memory import MemoryCard, MemoryProvenance, UserMemory
from kairos.memory.safety import alerts, topics_of, touches
from kairos.models.types import Message, SystemPrompt
from kairos.plugins.memory import MemoryPlugin
from kairos.testing import ScriptedModel, reply
from tests.memory.conftest import AT, op, ops


def card(content: str, importance: float = 0.9) -> MemoryCard:
    return MemoryCard(1, "k", "alice", "semantic", "note", "constraint", content, {}, importance, 1, "current", "add",
                      0.0, 0.0, None, None, MemoryProvenance("s1", (0,), "user"))  # fmt: skip


@pytest.mark.parametrize(
    ("memory", "request_", "touched"),
    [
        ("The user is allergic to peanuts", "Is a snack bar with nuts OK for me to eat?", True),
        ("The user is allergic to peanuts", "What is the name of my project?", False),
        ("Allergic to penicillin, breaks out in hives", "My dentist wants to prescribe amoxicillin. OK?", True),
        ("Allergic to codeine", "They offered me Tylenol with codeine for the pain.", True),
        ("Never share my bank password with anyone", "Log in to my bank account for me", True),
        ("Has type 1 diabetes and uses insulin", "Plan a three-day hiking trip", True),
        ("Works on project Bluefin", "Is a snack bar with nuts OK for me to eat?", False),  # not safety-relevant
    ],
)
def test_a_request_touches_a_safety_memory_by_topic_or_by_name(memory: str, request_: str, touched: bool) -> None:
    assert touches(request_, card(memory)) is touched


def test_ordinary_memories_are_not_safety_relevant_and_alerts_are_capped() -> None:
    assert topics_of("Uses tabs for indentation") == []
    many = [card(f"Allergic to item {i}", importance=i / 10) for i in range(6)]
    assert [c.content for c in alerts("What can I eat tonight?", many)] == [
        "Allergic to item 5", "Allergic to item 4", "Allergic to item 3",
    ]  # fmt: skip


async def test_the_allergy_is_the_last_thing_the_model_reads_when_the_request_touches_it(workspace: Path) -> None:
    model = ScriptedModel([ops(op("The user is allergic to peanuts", [0], category="constraint", importance=0.9))])
    mem = UserMemory.open(workspace / ".kairos", HashEmbedder(), model, user="alice")
    await mem.ingest_session([Message.user("I'm allergic to peanuts.")], session_id="old", at=AT)
    model.extend([reply("No: it has nuts, and you are allergic to peanuts."), reply("Bluefin.")])
    agent = Agent(model, system=SystemPrompt("test"), plugins=[MemoryPlugin(mem, extract_after_session=False)])
    store = SessionStore(workspace / "sessions")
    session = store.new()
    try:
        async for _ in agent.run(session, "Is a snack bar with nuts OK for me to eat?"):
            pass
        status = model.requests[-1].messages[-1]
        assert status.origin is not None and status.origin.kind == "status"
        assert "Safety, from what the user told you before" in status.content
        assert "\n  The user is allergic to peanuts (the user said, 2026-03-01)" in status.content
        async for _ in agent.run(session, "What is the name of my project?"):
            pass
        assert "allergic" not in model.requests[-1].messages[-1].content  # this request does not touch it
    finally:
        await session.aclose()
        store.close()
        mem.close()
