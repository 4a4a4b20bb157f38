"""The ingest ledger: an ingest cut short (Ctrl-C, SIGTERM, kill -9) is undone and resumed after its last answer."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kairos.knowledge import HashEmbedder
from kairos.memory import UserMemory
from kairos.models.types import Message, ModelRequest, StreamEvent
from kairos.testing import ScriptedModel, reply
from tests.memory.conftest import AT, LATER, op, ops
from tests.support.crash import kill_9_at


class HangsOnTheNote(ScriptedModel):
    """Answers the extraction from its script; the session-note request (no tools) hangs until cancelled."""

    def __init__(self, *steps: object) -> None:
        super().__init__(list(steps))  # type: ignore[arg-type]
        self.noting = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        if not request.tools:
            self.noting.set()
            await asyncio.Event().wait()
        async for event in super().stream(request):
            yield event


def open_memory(state: Path, model: ScriptedModel) -> UserMemory:
    return UserMemory.open(state, HashEmbedder(), model, user="alice", session_notes=True)


MOVED = [Message.user("I moved to Munich. My dog is called Rex.")]


async def test_an_ingest_cut_short_is_undone_and_done_again_without_duplicates(tmp_path: Path) -> None:
    state = tmp_path / ".kairos"
    mem = open_memory(state, ScriptedModel([ops(op("Lives in Berlin", [0])), reply("")]))
    await mem.ingest_session([Message.user("I live in Berlin.")], session_id="s0", at=AT)
    (berlin,) = mem.current()
    mem.close()
    supersede = {"op": "supersede", "id": berlin.id, "content": "Lives in Munich", "evidence": [0]}
    rex = op("Has a dog called Rex", [0], category="relationship")

    hanging = HangsOnTheNote(ops(supersede, rex))
    mem = open_memory(state, hanging)
    task = asyncio.create_task(mem.ingest_session(MOVED, session_id="s1", at=LATER))
    await asyncio.wait_for(hanging.noting.wait(), 30)
    task.cancel()  # the process stops mid-ingest: the operations applied so far are in the database
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(c.content for c in mem.current()) == ["Has a dog called Rex", "Lives in Munich"]
    assert [(p.session_id, p.messages, p.at) for p in mem.unfinished_ingests()] == [("s1", 1, LATER)]
    mem.close()

    retry = ScriptedModel([reply("Moved to Munich; has a dog called Rex")])
    mem = open_memory(state, retry)
    try:
        report = await mem.ingest_session(MOVED, session_id="s1", at=LATER)
        assert "undone first (rows removed: 2)" in report.note  # Munich's version and Rex, then replayed
        assert len(retry.requests) == 1 and retry.requests[0].tools == ()  # the kept extraction is not asked again
        assert sorted(c.content for c in mem.current()) == [
            "Has a dog called Rex", "Lives in Munich", "Moved to Munich; has a dog called Rex",
        ]  # fmt: skip
        versions = [(c.content, c.version, c.status) for c in mem.history() if c.key == berlin.key]
        assert versions == [("Lives in Berlin", 1, "superseded"), ("Lives in Munich", 2, "current")]
        assert mem.unfinished_ingests() == [] and mem.store.check()["rows"] == mem.store.check()["fts_rows"]

        calls = len(retry.requests)
        again = await mem.ingest_session(MOVED, session_id="s1", at=LATER)
        assert again.note == "already ingested" and len(retry.requests) == calls and len(mem.current()) == 3
    finally:
        mem.close()


async def test_the_same_session_id_with_other_messages_is_a_new_ingest(tmp_path: Path) -> None:
    model = ScriptedModel([ops(op("Lives in Berlin", [0])), reply(""), ops(op("Plays the cello", [0])), reply("")])
    mem = open_memory(tmp_path / ".kairos", model)
    try:
        await mem.ingest_session([Message.user("I live in Berlin.")], session_id="chat", at=AT)
        report = await mem.ingest_session([Message.user("I play the cello.")], session_id="chat", at=LATER)
        assert report.note == "" and sorted(c.content for c in mem.current()) == ["Lives in Berlin", "Plays the cello"]
    finally:
        mem.close()


CHILD = textwrap.dedent(
    """
    import asyncio, sys, time
    from datetime import UTC, datetime
    from pathlib import Path
    from kairos.knowledge import HashEmbedder
    from kairos.memory import UserMemory
    from kairos.models.types import Message
    from kairos.testing import ScriptedModel, call, reply

    def step(request):
        if request.tools:  # the extraction
            return reply("", call("save_memories", {"operations": [
                {"op": "add", "content": "Has a dog called Rex", "evidence": [0], "kind": "semantic",
                 "category": "relationship"}]}))
        print("noting", flush=True)
        time.sleep(600)  # killed here, between the extraction's writes and the note

    mem = UserMemory.open(Path(sys.argv[1]), HashEmbedder(), ScriptedModel([step, step]), user="alice",
                          session_notes=True)
    at = datetime(2026, 4, 1, 12, tzinfo=UTC)
    asyncio.run(mem.ingest_session([Message.user("My dog is called Rex.")], session_id="s1", at=at))
    """
)


async def test_kill_9_mid_ingest_leaves_a_ledger_entry_that_the_next_ingest_undoes_and_redoes(tmp_path: Path) -> None:
    state = tmp_path / ".kairos"
    kill_9_at(CHILD, "noting", str(state))  # after the extraction wrote, while the note is asked for
    retry = ScriptedModel([reply("Dog: Rex")])  # the extraction's kept answer is replayed, not asked again
    mem = open_memory(state, retry)
    try:
        assert [c.content for c in mem.current()] == ["Has a dog called Rex"]  # what the killed attempt wrote
        (pending,) = mem.unfinished_ingests()
        assert (pending.session_id, pending.messages, pending.at) == ("s1", 1, LATER)
        report = await mem.ingest_session([Message.user("My dog is called Rex.")], session_id="s1", at=LATER)
        assert "undone first (rows removed: 1)" in report.note
        assert sorted(c.content for c in mem.current()) == ["Dog: Rex", "Has a dog called Rex"]
        assert mem.unfinished_ingests() == [] and len(retry.requests) == 1
    finally:
        mem.close()


async def test_a_session_that_grew_is_read_from_where_the_last_ingest_stopped(tmp_path: Path) -> None:
    first = [Message.user("I live in Berlin."), Message.assistant("Noted.")]
    grown = [*first, Message.user("I play the cello, and I still live there."), Message.assistant("Nice.")]
    model = ScriptedModel([ops(op("Lives in Berlin", [0])), reply(""), ops(op("Plays the cello", [2])), reply("")])
    mem = open_memory(tmp_path / ".kairos", model)
    try:
        await mem.ingest_session(first, session_id="chat", at=AT)
        report = await mem.ingest_session(grown, session_id="chat", at=LATER)
        prompt = model.requests[2].messages[0].content
        assert "[2] user: I play the cello" in prompt and "I live in Berlin" not in prompt.split("Conversation:")[1]
        assert report.rounds_indexed == 1 and sorted(c.content for c in mem.current()) == [
            "Lives in Berlin", "Plays the cello",
        ]  # fmt: skip
        hits = await mem.past_conversations("Berlin cello", 4)
        assert sorted(h.position for h in hits) == [0, 1]  # the second part's round follows the first's
        again = await mem.ingest_session(grown, session_id="chat", at=LATER)
        assert again.note == "already ingested" and len(model.requests) == 4
    finally:
        mem.close()
