"""Issue 24 §3 on the bundled model: memory stores only what the user said, and the allergy is not missed.

The issue's conversation: the user says they are allergic to peanuts, use tabs and work on project
Bluefin; a new session asks whether a snack bar with nuts is OK and for the project's name. Before
the fix, the assistant's reply was stored as an "event" memory in the first person, the second
session's wrong answer ("The snack bar with nuts is available") was stored as a memory citing the
``memory_search`` result, and the user's own words were labelled "(from external content)".

What the harness owes the model is asserted: the allergy is stored as the user's words, and every
request of the second session ends with it as a safety line. Whether the 1.5B model then warns is
the model's part, and it varies from run to run (CI saw "Yes, a snack bar with nuts is OK for me",
the next run "No, ... not OK", a third went round in circles on a tool call): memory-eval's safety
probe measures it over cases instead of one pass/fail sample here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
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
from kairos.models.types import ModelRequest, StreamEvent
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


async def test_the_peanut_conversation(
    bundled_model: LocalModel, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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

    requests: list[ModelRequest] = []
    stream = bundled_model.stream

    def seen(request: ModelRequest) -> AsyncIterator[StreamEvent]:
        requests.append(request)
        return stream(request)

    monkeypatch.setattr(bundled_model, "stream", seen)
    _, second = await session_of(bundled_model, workspace, ASK)
    asked = [r for r in requests if any(m.from_user and m.content.endswith("] " + ASK) for m in r.messages)]
    assert asked
    for request in asked:  # the last thing the model reads before it answers: the allergy, in the user's words
        status = request.messages[-1].content
        assert "Safety" in status, status
        safety = status[status.index("Safety") :]
        assert "peanut" in safety.lower() and "(the user said" in safety, status
    after_second = stored()
    new = [m for m in after_second if m not in after_first]
    # the user only asked in the second session: nothing of it is a fact about them, least of all the answer
    assert not [m for m in new if "snack" in m[0].lower() or "available" in m[0].lower()], new
    assert not any("(from external content)" in line for *_, line in after_second)
    assert first != second
