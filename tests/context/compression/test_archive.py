"""Layer 4: one frozen git-log entry per completed round; old rounds are archived, not summarised."""

from __future__ import annotations

from kairos.context.compression import COMPRESSED, CompressionEvent, round_log, state_of
from kairos.context.compression.archive import rounds
from kairos.context.compression.config import SpillConfig
from kairos.context.session import Session
from kairos.models.types import HARNESS, Message, ToolCall
from kairos.testing import ScriptedModel, call, reply
from tests.context.compression.helpers import collect, config, make_agent


def test_rounds_split_at_real_user_messages_and_complete_when_answered() -> None:
    msgs = [
        Message.user("one"),
        Message.assistant("", (ToolCall("c1", "note", "{}"),)),
        Message.tool("c1", "r", "note"),
        Message.assistant("answer one"),
        Message("user", "<agent_status>x</agent_status>", origin=HARNESS),
        Message.user("two"),
        Message.assistant("", (ToolCall("c2", "note", "{}"),)),
        Message.tool("c2", "r", "note"),
    ]
    rs = rounds(msgs)
    assert [(r.start, r.end, r.complete) for r in rs] == [(0, 5, True), (5, 8, False)]


async def test_each_completed_round_gets_one_frozen_entry(session: Session) -> None:
    model = ScriptedModel(
        [
            reply("", call("note", {"text": "alpha"})),
            reply("The note said alpha."),
            reply("", call("fetch", {"tag": "b", "chars": 800})),
            reply("Fetched b."),
            reply("bye"),
        ]
    )
    agent, ext = make_agent(model, config(strategy="none"))
    await collect(agent, session, "Write a note")
    await collect(agent, session, "Fetch b")
    assert round_log(session) == []  # no layer 5 yet: nothing was written on the way
    await collect(agent, session, "Thanks")
    log = ext.round_log(session)  # every round that is over (answered), logged by code, not a model
    assert len(log) == 3 and log[2].endswith('answered: "bye"')
    assert log[0].startswith("round 1 · messages 0–3") and 'asked: "Write a note"' in log[0]
    assert 'note({"text": "alpha"}) → 5 chars' in log[0] and 'answered: "The note said alpha."' in log[0]
    assert 'fetch({"tag": "b", "chars": 800}) → 800 chars' in log[1]
    assert round_log(session) == log == ext.round_log(session)  # frozen: asking again changes nothing


async def test_old_rounds_are_archived_without_a_summariser_call(session: Session) -> None:
    model = ScriptedModel(
        [
            reply("", call("fetch", {"tag": "a", "chars": 3000})),
            reply("", call("fetch", {"tag": "b", "chars": 3000})),
            reply("A and B are done."),
            reply("", call("fetch", {"tag": "c", "chars": 3000})),
            reply("C is done."),
        ],
        context_window=3000,
    )
    summ = ScriptedModel([lambda r: reply("Facts about c.")] * 4)
    events: list[CompressionEvent] = []
    agent, _ = make_agent(model, config(), summarizer=summ, events=events)
    await collect(agent, session, "Do a and b")
    await collect(agent, session, "Now c")
    fired = [e for e in events if e.kind == "compressed"]
    assert fired
    texts = [state_of(session).ledger.get("compressed", s) or "" for s in (2, 4)]
    assert texts[0].startswith(f"{COMPRESSED} round 1 archived") and 'asked: "Do a and b"' in texts[0]
    assert texts[1].startswith(f"{COMPRESSED} result of fetch") and "round log in the result of call" in texts[1]
    compressed = [r.messages[0].content.split("Text to compress:\n")[1] for r in summ.requests]
    assert compressed and all(t.startswith("c line 0") for t in compressed)  # round 1 went to no model


async def test_a_round_entry_names_the_file_a_spilled_result_was_saved_to(session: Session) -> None:
    model = ScriptedModel(
        [
            reply("", call("fetch", {"tag": "big", "chars": 3000})),
            reply("", call("note", {"text": "small"})),
            reply("Done."),
        ]
    )
    agent, ext = make_agent(model, config(strategy="none", spill=SpillConfig(max_chars=1000)))
    await collect(agent, session, "Fetch big and note small")
    (log,) = ext.round_log(session)
    assert 'fetch({"tag": "big", "chars": 3000}) → 3,000 chars [saved: ' in log
    assert log.count("[saved: ") == 1  # only the spilled result has a file
