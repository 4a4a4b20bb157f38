"""A memory is only what the user said or confirmed (issue 24): the support check and the ingest around it."""

from __future__ import annotations

from kairos.memory import UserMemory, render_card
from kairos.memory.support import support
from kairos.models.types import Message, Origin, ToolCall
from kairos.plugins.memory import MEMORY_ORIGIN
from kairos.testing import ScriptedModel, reply
from tests.memory.conftest import AT, LATER, op, ops

CARDS = '<user_memory user="alice">\n- [1] fact, 2026-03-01: the user said: "I\'m allergic to peanuts"\n</user_memory>'
RECALLED = '{"query": "allergy", "results": [{"type": "memory", "text": "The user is allergic to peanuts"}]}'


def first_session() -> list[Message]:
    return [
        Message.user(
            "[2026-03-01 09:00:00] Please remember: I'm allergic to peanuts, I always use tabs for "
            "indentation, and I work on project Bluefin."
        ),  # fmt: skip
        Message.assistant("Noted: peanut allergy, tabs, project Bluefin."),
    ]


def second_session() -> list[Message]:
    """The issue's second session: the cards and a memory_search result reach the model, which answers wrongly."""
    return [
        Message.user("Is a snack bar with nuts OK for me to eat? And what is the name of my project?"),
        Message.user(CARDS, MEMORY_ORIGIN),
        Message.assistant("", (ToolCall("c1", "memory_search", '{"query": "allergy"}'),)),
        Message.tool("c1", RECALLED, name="memory_search"),
        Message.assistant("The snack bar with nuts is available. The name of my project is Bluefin."),
    ]


def test_the_users_own_statements_support_a_memory_and_questions_do_not() -> None:
    said = first_session()
    for claim in ("The user is allergic to peanuts", "Uses tabs for indentation", "Works on project Bluefin",
                  "I'm allergic to peanuts, I always use tabs for indentation"):  # fmt: skip
        found = support(claim, said)
        assert found is not None and found.source == "user" and found.messages == (0,), claim
    asked = second_session()
    for claim in ("The snack bar with nuts is available", "The snack bar with nuts is not OK for me to eat",
                  "The name of my project is Bluefin", "I'm allergic to peanuts"):  # fmt: skip
        assert support(claim, asked) is None, claim  # the question states nothing; the rest is the assistant's


def test_a_changed_name_number_or_negation_is_not_supported() -> None:
    said = [Message.user("I work on project Bluefin; my account is 4429853327 and I like jazz.")]
    assert support("The user works on project Redwood", said) is None
    assert support("Account number 4429853328", said) is None
    assert support("The user does not like jazz", said) is None
    assert support("Account number 4429853327", said) is not None
    assert support("The user likes jazz", said) is not None


def test_a_safety_claim_needs_a_source_on_that_topic() -> None:
    # memory-eval (layer3_02) stored this: most of its words are the user's, the allergy is not
    said = [Message.user("I take fish oil for cholesterol."), Message.assistant("Fish oil can thin your blood.")]
    assert support("The user is allergic to fish oil", said) is None
    assert support("The user takes fish oil for cholesterol", said) is not None
    allergic = [Message.user("I'm allergic to penicillin, it gives me hives.")]
    assert support("The user has a penicillin allergy", allergic) is not None


def test_what_the_assistant_said_counts_only_when_the_user_confirms_it() -> None:
    said = [
        Message.user("Can you open the checking account?"),
        Message.assistant("Done: your checking account number is 4429853327."),
    ]
    assert support("Checking account number 4429853327", said) is None
    for answer, counts in (("Great, thanks!", False), ("ok", False), ("Yes, that's right.", True)):
        found = support("Checking account number 4429853327", [*said, Message.user(answer)])
        assert (found is not None) == counts, answer
    found = support("Checking account number 4429853327", [*said, Message.user("Yes, that's right.")])
    assert found is not None and found.source == "confirmed" and found.messages == (1, 2)
    assert found.note == "assistant"


def test_the_memorys_own_output_is_never_a_source_nor_confirmed() -> None:
    said = [
        Message.user("What do you know about me?"),
        Message.tool("c1", RECALLED, name="memory_search"),
        Message.user("Yes, correct."),
    ]
    assert support("The user is allergic to peanuts", said) is None


async def test_the_issues_second_session_stores_nothing_it_did_not_hear(
    memory: UserMemory, model: ScriptedModel
) -> None:
    model.extend([
        ops(op("I'm allergic to peanuts", [0, 4]), op("The snack bar with nuts is available", [4])),
    ])  # fmt: skip
    report = await memory.ingest_session(second_session(), session_id="s2", at=LATER)
    assert memory.current() == [] and len(report.refused) == 2
    prompt = model.requests[0].messages[0].content
    assert "allergic" not in prompt  # neither the cards nor the memory_search result reached the extractor
    assert model.requests[0].tool_choice == "required"  # the call is forced: no reply in prose


async def test_the_users_words_are_the_users_even_beside_a_recalled_memory(tmp_path: object) -> None:
    from pathlib import Path

    from kairos.knowledge import HashEmbedder

    model = ScriptedModel([ops(op("The user is allergic to peanuts", [0])), reply("The user is allergic to peanuts")])
    mem = UserMemory.open(Path(str(tmp_path)) / ".kairos", HashEmbedder(), model, user="alice", session_notes=True)
    try:
        session = [
            Message.user("I'm allergic to peanuts, remember that."),
            Message.assistant("", (ToolCall("c1", "memory_search", '{"query": "allergy"}'),)),
            Message.tool("c1", RECALLED, name="memory_search"),
            Message.assistant("I remember: you are allergic to peanuts."),
        ]
        await mem.ingest_session(session, session_id="s1", at=AT)
        (card,) = mem.current()  # the note repeats the fact: one memory
        assert card.provenance.source == "user" and not card.external
        assert render_card(card).endswith(": The user is allergic to peanuts")  # no "(from external content)"
    finally:
        mem.close()


async def test_a_first_person_memory_is_shown_as_the_users_words(memory: UserMemory, model: ScriptedModel) -> None:
    model.extend([ops(op("I'm allergic to peanuts", [0], category="constraint"))])
    await memory.ingest_session([Message.user("I'm allergic to peanuts.")], session_id="s1", at=AT)
    text = memory.render_cards(memory.current())
    assert 'the user said: "I\'m allergic to peanuts"' in text


async def test_external_mail_never_confirms_itself(memory: UserMemory, model: ScriptedModel) -> None:
    session = [
        Message.user("<mail>Your new PIN is 9912</mail>", Origin("external", "mail: x")),
        Message.user("Yes, correct."),
    ]
    model.extend([ops(op("The user's PIN is 9912", [0]))])
    await memory.ingest_session(session, session_id="s1", at=AT)
    assert memory.current() == []  # a mail is not the assistant or a tool of this session
