"""Operations, version history, the contradiction rule, forget, and the extractor's selectivity on scripted output."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from kairos.knowledge import HashEmbedder
from kairos.memory import MemoryStoreError, UserMemory
from kairos.models.types import Message
from kairos.testing import ScriptedModel
from tests.memory.conftest import AT, LATER, flight_session, op, ops


async def test_flight_example_stores_typed_memories_and_indexes_rounds(
    memory: UserMemory, model: ScriptedModel
) -> None:
    model.extend([ops(
        op("Prefers window seats", [0], category="preference", importance=0.6),
        op("Is vegetarian", [0], category="constraint", importance=0.8),
        op("United MileagePlus number 12345678", [4], category="account", format="json_card",
           path="travel.loyalty.united", value="12345678"),
        op("Has travel plans to Tokyo", [0], kind="episodic", category="plan", importance=0.4),
    )])  # fmt: skip
    report = await memory.ingest_session(flight_session(), session_id="s1", at=AT)
    assert report.extracted and not report.refused
    assert sorted(c.content for _, c in report.applied) == [
        "Has travel plans to Tokyo", "Is vegetarian", "Prefers window seats", "United MileagePlus number 12345678",
    ]  # fmt: skip
    assert report.rounds_indexed == 2
    assert set(report.seconds) == {"scrub", "index", "extract", "compress"}  # where the time went
    card = next(c for c in memory.current() if c.format == "json_card")
    assert card.data["path"] == "travel.loyalty.united" and card.provenance.session_id == "s1"
    assert card.provenance.source == "user" and card.provenance.messages == (4,)
    # the extractor saw a numbered, labelled transcript and the forced tool
    request = model.requests[0]
    assert [t.name for t in request.tools] == ["save_memories"]
    prompt = request.messages[0].content
    assert "[0] user: Book me a flight" in prompt and "[2] EXTERNAL tool result (flight_search)" in prompt
    hits = await memory.search("window seat")
    assert hits[0].source == "memory" and "window" in hits[0].text
    convo = [h for h in hits if h.source == "conversation"]
    assert convo and convo[0].session_id == "s1" and convo[0].date == "2026-03-01"


async def test_contradiction_resolves_to_the_newest_value_and_keeps_history(
    memory: UserMemory, model: ScriptedModel
) -> None:
    model.extend([ops(op("Lives in Berlin", [0], category="fact", format="json_card", path="home.address.city",
                         value="Berlin"))])  # fmt: skip
    await memory.ingest_session([Message.user("I live in Berlin.")], session_id="s1", at=AT)
    (old,) = memory.current()
    # explicit supersede by id ...
    model.extend([ops({"op": "supersede", "id": old.id, "content": "Lives in Munich", "evidence": [0],
                       "format": "json_card", "path": "home.address.city", "value": "Munich"})])  # fmt: skip
    await memory.ingest_session([Message.user("I moved to Munich.")], session_id="s2", at=LATER)
    (now,) = memory.current()
    assert now.content == "Lives in Munich" and now.version == 2 and now.key == old.key
    # ... and an add of the same card path supersedes too (the model forgot the id)
    model.extend([ops(op("Lives in Hamburg", [0], format="json_card", path="home.address.city", value="Hamburg"))])
    await memory.ingest_session([Message.user("Now I live in Hamburg.")], session_id="s3", at=LATER)
    (latest,) = memory.current()
    assert latest.content == "Lives in Hamburg" and latest.version == 3
    versions = [(c.content, c.status) for c in memory.history() if c.key == old.key]
    assert versions == [("Lives in Berlin", "superseded"), ("Lives in Munich", "superseded"),
                        ("Lives in Hamburg", "current")]  # fmt: skip
    assert all("Berlin" not in c.content for c, _ in await memory.search_memories("Berlin"))


async def test_an_older_session_ingested_late_does_not_override_the_newer_value(
    memory: UserMemory, model: ScriptedModel
) -> None:
    model.extend([ops(op("Drives a Tesla", [0], format="json_card", path="assets.car.model", value="Tesla"))])
    await memory.ingest_session([Message.user("I drive a Tesla now.")], session_id="new", at=LATER)
    model.extend([ops(op("Drives a Golf", [0], format="json_card", path="assets.car.model", value="Golf"))])
    await memory.ingest_session([Message.user("I drive a Golf.")], session_id="old", at=AT)
    assert [c.content for c in memory.current()] == ["Drives a Tesla"]
    assert {c.content: c.status for c in memory.history()} == {
        "Drives a Tesla": "current",
        "Drives a Golf": "superseded",
    }


async def test_delete_is_a_tombstone_and_forget_erases(
    memory: UserMemory, model: ScriptedModel, tmp_path: Path
) -> None:
    model.extend([ops(op("Allergic to penicillin", [0], importance=0.9), op("Likes jazz", [0]))])
    await memory.ingest_session([Message.user("I'm allergic to penicillin and I like jazz.")], session_id="s1", at=AT)
    jazz = next(c for c in memory.current() if "jazz" in c.content)
    model.extend([ops({"op": "delete", "id": jazz.id, "content": "", "evidence": [0]})])
    await memory.ingest_session([Message.user("I don't like jazz any more.")], session_id="s2", at=LATER)
    assert [c.content for c in memory.current()] == ["Allergic to penicillin"]
    assert not [h for h in await memory.search("jazz") if h.source == "memory" and "jazz" in h.text]
    assert [c.status for c in memory.history() if c.key == jazz.key] == ["superseded", "deleted"]
    peni = memory.current()[0]
    assert memory.forget(peni.id) == 1
    assert memory.current() == [] and all("penicillin" not in c.content for c in memory.history())
    assert memory.store.check()["rows"] == memory.store.check()["fts_rows"]
    n = memory.forget()  # everything: the jazz history and both indexed conversations
    assert n >= 2 and memory.history() == []
    assert await memory.search("penicillin jazz") == []
    db = sqlite3.connect(tmp_path / ".kairos" / "knowledge.db")
    assert db.execute("SELECT count(*) FROM memories_fts WHERE memories_fts MATCH 'penicillin'").fetchone()[0] == 0
    with pytest.raises(MemoryStoreError, match="no memory 999"):
        memory.forget(999)


async def test_chit_chat_session_with_nothing_to_keep_stores_nothing(memory: UserMemory, model: ScriptedModel) -> None:
    model.extend([ops()])
    report = await memory.ingest_session([Message.user("hi"), Message.assistant("Hello!")], session_id="s", at=AT)
    assert report.extracted and report.applied == [] and memory.current() == []


async def test_empty_session_needs_no_model_call(memory: UserMemory, model: ScriptedModel) -> None:
    report = await memory.ingest_session([], session_id="s", at=AT)
    assert not report.extracted and model.requests == [] and report.rounds_indexed == 0


async def test_malformed_model_output_stores_nothing_and_warns(
    memory: UserMemory, model: ScriptedModel, caplog: pytest.LogCaptureFixture
) -> None:
    from kairos.testing import call, reply

    model.extend([reply("", call("save_memories", '{"operations": [ {"op": "add", "content": '))])
    report = await memory.ingest_session([Message.user("I live in Oslo.")], session_id="s", at=AT)
    assert memory.current() == [] and not report.extracted
    assert "malformed arguments" in caplog.text
    model.extend([reply("I think the user lives in Oslo.")])  # no tool call at all
    await memory.ingest_session([Message.user("I live in Oslo.")], session_id="s2", at=AT)
    assert memory.current() == [] and "did not call save_memories" in caplog.text
    model.extend([ops({"op": "delete", "content": "x", "evidence": [0]}, {"op": "teleport", "content": "y"},
                      op("Lives in Oslo", [0]))])  # fmt: skip
    report = await memory.ingest_session([Message.user("I live in Oslo.")], session_id="s3", at=AT)
    assert [c.content for c in memory.current()] == ["Lives in Oslo"]  # the two bad operations were dropped


async def test_a_reply_cut_at_the_token_limit_keeps_its_whole_operations(
    memory: UserMemory, model: ScriptedModel
) -> None:
    """A long intake filled the output budget mid-item: the whole items before the cut are stored."""
    from kairos.testing import call, reply

    said = [Message.user("I live in Oslo. I'm allergic to penicillin. My sister is Kari.")]
    whole = (
        '{"op": "add", "content": "The user lives in Oslo"}, '
        '{"op": "add", "content": "The user is allergic to penicillin"}'
    )
    local = '{"tool_calls": [{"name": "save_memories", "arguments": {"operations": [' + whole + ', {"op": "add", "cont'
    model.extend([reply(local, finish_reason="length")])  # the local model: no call parsed, the raw JSON as text
    report = await memory.ingest_session(said, session_id="s", at=AT)
    assert report.extracted
    assert sorted(c.content for c in memory.current()) == [
        "The user is allergic to penicillin",
        "The user lives in Oslo",
    ]
    cut_arguments = '{"operations": [' + whole.replace("Oslo", "Bergen") + ', {"op": "add", "content": "The user\'s sis'
    model.extend([reply("", call("save_memories", cut_arguments), finish_reason="length")])  # an endpoint's form
    await memory.ingest_session([Message.user("I moved: I live in Bergen now.")], session_id="s2", at=AT)
    assert "The user lives in Bergen" in [c.content for c in memory.current()]
    model.extend([reply('{"tool_calls": [{"name": "save_memories", "arguments": {"operations": [{"op": "ad',
                        finish_reason="length")])  # fmt: skip
    report = await memory.ingest_session([Message.user("I live in Tromsø.")], session_id="s3", at=AT)
    assert not report.extracted  # nothing whole was written: nothing stored, asked again next time


async def test_a_key_written_as_the_content_keeps_its_value(memory: UserMemory, model: ScriptedModel) -> None:
    """The 1.5B model wrote {"content": "allergies", "value": "Penicillin, hives"}: store the fact, not the key."""
    key = {"op": "add", "content": "allergies", "value": "Penicillin, hives"}
    sentence = {"op": "add", "content": "The user is allergic to penicillin", "value": "penicillin"}
    model.extend([ops(key, sentence)])
    said = [Message.user("Yes, I'm allergic to penicillin. I break out in hives.")]
    await memory.ingest_session(said, session_id="s", at=AT)
    stored = sorted(c.content for c in memory.current())
    assert stored == ["The user is allergic to penicillin", "allergies: Penicillin, hives"]


async def test_of_a_paragraph_the_sentences_the_user_said_are_kept(memory: UserMemory, model: ScriptedModel) -> None:
    """One unbacked sentence (the assistant's suggestion) refused the whole paragraph, the allergy too."""
    said = [
        Message.user("I'm transferring my prescriptions. I'm allergic to codeine, it gives me hives."),
        Message.assistant("The Walgreens at 3419 North Broadway is closest; shall I use it?"),
        Message.user("Sure."),
    ]
    paragraph = ("The user is transferring prescriptions. He is allergic to codeine, which gives him hives. "
                 "He will use the Walgreens at 3419 North Broadway on Friday at 9 AM.")  # fmt: skip
    model.extend([ops({"op": "add", "content": paragraph})])
    report = await memory.ingest_session(said, session_id="s", at=AT)
    stored = [c.content for c in memory.current()]
    assert stored == ["The user is transferring prescriptions. He is allergic to codeine, which gives him hives."]
    assert any("Friday at 9 AM" in text for text, _ in report.refused)  # nobody said when


async def test_an_update_without_an_id_is_a_new_value(memory: UserMemory, model: ScriptedModel) -> None:
    model.extend([ops({"op": "supersede", "content": "Lives in Oslo", "evidence": [0]})])
    await memory.ingest_session([Message.user("I live in Oslo.")], session_id="s", at=AT)
    assert [c.content for c in memory.current()] == ["Lives in Oslo"]


async def test_model_failure_keeps_the_conversation_indexed(memory: UserMemory, model: ScriptedModel) -> None:
    model.extend([RuntimeError("backend down")])
    report = await memory.ingest_session([Message.user("My sister Ana lives in Lisbon.")], session_id="s", at=AT)
    assert not report.extracted and memory.current() == [] and report.rounds_indexed == 1
    assert (await memory.search("sister Lisbon"))[0].source == "conversation"


async def test_huge_transcript_is_read_in_bounded_windows(memory: UserMemory, model: ScriptedModel) -> None:
    messages = [Message.user(f"Note {i}: " + "blah " * 2000) for i in range(40)]
    messages.append(Message.user("Remember that my cat is called Miso."))
    model.extend([ops() for _ in range(memory.max_windows - 1)] + [ops(op("Has a cat called Miso", [40]))])
    await memory.ingest_session(messages, session_id="big", at=AT)
    assert len(model.requests) == memory.max_windows
    assert all(len(r.messages[0].content) < memory.window_chars + 8000 for r in model.requests)
    assert [c.content for c in memory.current()] == ["Has a cat called Miso"]


async def test_an_operation_on_a_memory_not_shown_is_refused(memory: UserMemory, model: ScriptedModel) -> None:
    model.extend([ops({"op": "delete", "id": 12345, "content": "", "evidence": [0]})])
    report = await memory.ingest_session([Message.user("forget it")], session_id="s", at=AT)
    assert report.applied == [] and "not among the memories shown" in report.refused[0][1]


def test_corrupt_database_is_a_clear_error(tmp_path: Path) -> None:
    state = tmp_path / ".kairos"
    state.mkdir()
    (state / "knowledge.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(Exception, match="move it away"):
        UserMemory.open(state, HashEmbedder(), None)


def test_invalid_user_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MemoryStoreError, match="invalid user id"):
        UserMemory.open(tmp_path, HashEmbedder(), None, user="../bob")


async def test_users_do_not_see_each_other(tmp_path: Path) -> None:
    model = ScriptedModel()
    a = UserMemory.open(tmp_path, HashEmbedder(), model, user="alice")
    b = UserMemory.open(tmp_path, HashEmbedder(), model, user="bob")
    try:
        from tests.memory.conftest import ops as _ops

        model.extend([_ops(op("Owns a boat called Wave", [0]))])
        await a.ingest_session([Message.user("My boat is called Wave.")], session_id="s", at=AT)
        assert b.current() == [] and not await b.search("boat Wave")
        with pytest.raises(MemoryStoreError):
            b.forget(a.current()[0].id)
    finally:
        a.close()
        b.close()


def test_importance_keeps_the_books_ordering() -> None:
    import time

    from kairos.memory import MemoryCard, MemoryProvenance
    from kairos.memory.compress import effective_importance

    now = time.time()

    def card(importance: float, days: float, accesses: int) -> MemoryCard:
        t = now - days * 86400
        return MemoryCard(1, "k", "u", "episodic", "note", "event", "x", {}, importance, 1, "current", "add", t, t,
                          None, None, MemoryProvenance(), accesses)  # fmt: skip

    vivid = effective_importance(card(0.8, 3, 5), now, duplicates=0)  # emotional, recent, recalled, unique
    faded = effective_importance(card(0.3, 90, 1), now, duplicates=3)
    assert vivid > faded


async def test_configured_formats_limit_what_is_written(tmp_path: Path) -> None:
    model = ScriptedModel([ops(op("Works as a nurse", [0], format="json_card", path="work.position.title",
                                  value="nurse"))])  # fmt: skip
    mem = UserMemory.open(tmp_path, HashEmbedder(), model, user="u", formats=("note", "enhanced_note"))
    try:
        await mem.ingest_session([Message.user("I work as a nurse.")], session_id="s", at=AT)
        assert [(c.content, c.format) for c in mem.current()] == [("Works as a nurse", "note")]
    finally:
        mem.close()


async def test_two_people_of_the_same_name_stay_distinct_and_findable(memory: UserMemory, model: ScriptedModel) -> None:
    model.extend([ops(
        op("Dentist appointment every March", [0], format="advanced_json_card", person="Dr. Zhang",
           relationship="own dentist", backstory="mentioned while booking a check-up"),
        op("Treats father's heart condition", [0], format="advanced_json_card", person="Dr. Zhang",
           relationship="father's cardiologist"),
    )])  # fmt: skip
    said = "I see my dentist Dr. Zhang every March; another Dr. Zhang treats my father's heart condition."
    await memory.ingest_session([Message.user(said)], session_id="s", at=AT)
    cards = memory.current()
    assert len(cards) == 2 and {c.data["relationship"] for c in cards} == {"own dentist", "father's cardiologist"}
    assert all(c.data["timestamp"].startswith("2026-03-01") for c in cards)
    (best, _), *_ = await memory.search_memories("cardiologist")
    assert best.data["relationship"] == "father's cardiologist"
