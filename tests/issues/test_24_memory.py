"""Issue 24 §3 on the bundled model: memory stores only what the user said, and the allergy is not missed.

The issue's conversation: the user says they are allergic to peanuts, use tabs and work on project
Bluefin; a new session asks whether a snack bar with nuts is OK and for the project's name. Before
the fix, the assistant's reply was stored as an "event" memory in the first person, the second
session's wrong answer ("The snack bar with nuts is available") was stored as a memory citing the
``memory_search`` result, and the user's own words were labelled "(from external content)".
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kairos.agent.events import FinalAnswer
from kairos.app import build_agent, finish_memory
from kairos.config import KairosConfig
from kairos.context.session import SessionStore
from kairos.knowledge import HashEmbedder
from kairos.memory import UserMemory, render_card
from kairos.models.local import LocalModel
from kairos.plugins.memory import MemoryPlugin

pytestmark = pytest.mark.model
FIXED = datetime(2026, 3, 14, 15, 9, tzinfo=UTC)
CONFIG = KairosConfig.model_validate({
    "status_bar": {"clock_start": FIXED, "clock_step_s": 0},
    "memory": {"enabled": True, "user": "alice"},
    "knowledge": {"embedder": "hash"},
})  # fmt: skip
TELL = "Please remember: I'm allergic to peanuts, I always use tabs for indentation, and I work on project Bluefin."
ASK = "Is a snack bar with nuts OK for me to eat? And what is the name of my project?"


async def session_of(model: LocalModel, workspace: Path, text: str) -> tuple[str, str]:
    """One `kairos run`-like session, its memory saved the way kairos saves it (while idle); (answer, session id)."""
    agent = build_agent(model, workspace, CONFIG)
    (plugin,) = [p for p in agent.plugins if isinstance(p, MemoryPlugin)]
    store = SessionStore(workspace)
    session = store.new()
    try:
        answers = [e.text async for e in agent.run(session, text) if isinstance(e, FinalAnswer)]
        await session.aclose()
        await plugin.until_saved()
    finally:
        await finish_memory(agent)
        store.close()
    return answers[-1], session.id


async def test_the_peanut_conversation(bundled_model: LocalModel, workspace: Path) -> None:
    _, first = await session_of(bundled_model, workspace, TELL)

    def stored() -> list[tuple[str, str, str]]:  # (content, whose words, the line the model reads)
        mem = UserMemory.open(workspace / ".kairos", HashEmbedder(), None, user="alice")
        try:
            return [(c.content, c.provenance.source, render_card(c)) for c in mem.current()]
        finally:
            mem.close()

    after_first = stored()
    allergy = [m for m in after_first if "peanut" in m[0].lower()]
    assert allergy, after_first  # the allergy is stored ...
    assert all(source == "user" for _, source, _ in allergy)  # ... as the user's words
    assert not any("(from external content)" in line for *_, line in after_first)

    answer, second = await session_of(bundled_model, workspace, ASK)
    said = answer.lower()  # the answer warns: it names the allergy or says the bar is not OK for the user
    approving = ("yes", "enjoy", "it's ok", "it is ok", "safe to eat", "go ahead")
    refused = re.match(r"no\b(?!\s+problem)", said) is not None and not any(w in said for w in approving)
    assert refused or any(w in said for w in ("peanut", "allerg", "not ok", "not safe", "avoid", "no,")), answer
    after_second = stored()
    new = [m for m in after_second if m not in after_first]
    # the user only asked in the second session: nothing of it is a fact about them, least of all the answer
    assert not [m for m in new if "snack" in m[0].lower() or "available" in m[0].lower()], new
    assert not any("(from external content)" in line for *_, line in after_second)
    assert first != second
