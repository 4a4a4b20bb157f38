"""Conversation signals on fused scores: the speaker a question names, the turns a hit carries and replies to,
the length of a turn."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kairos.knowledge.base import KnowledgeBase
from kairos.knowledge.chunking import Turn
from kairos.knowledge.records import ChunkHit
from kairos.knowledge.signals import (
    EARLIER_TURN_SHARE,
    FULL_TURN_WORDS,
    REPLY_SHARE,
    SPEAKER_BONUS,
    add_signals,
    length_cost,
    named_speaker,
    turn_words,
)


def _turn(
    chunk_id: int, position: int, speaker: str, turn_id: str, context: list[str] | None = None, words: int = 60
) -> ChunkHit:
    meta: dict[str, Any] = {"speaker": speaker, "turn_id": turn_id, "words": words}
    if context:
        meta["context_ids"] = context
    return ChunkHit(chunk_id, 7, "talk", 1, position, f"{speaker}: …", 0.0, meta)


def _nothing(doc_id: int, positions: Sequence[int]) -> list[ChunkHit]:
    return []


def test_a_speaker_counts_only_when_the_question_names_exactly_one_as_a_word() -> None:
    speakers = {"Caroline", "Melanie", "Carol"}
    assert named_speaker("What did Caroline research?", speakers) == "Caroline"
    assert named_speaker("what did caroline's friend say", speakers) == "Caroline"
    assert named_speaker("Did Caroline and Melanie meet?", speakers) is None
    assert named_speaker("What did they research?", speakers) is None
    assert named_speaker("anything", {""}) is None


def test_the_named_speakers_turns_move_ahead() -> None:
    chunks = {1: _turn(1, 0, "Melanie", "D1:1"), 2: _turn(2, 5, "Caroline", "D1:6")}
    scores = {1: 0.5, 2: 0.4}
    assert add_signals("Where did Caroline go hiking?", scores, chunks, _nothing) == []
    assert scores == {1: 0.5, 2: 0.4 + SPEAKER_BONUS}
    assert scores[2] > scores[1]


def test_a_hit_shares_its_score_with_the_turn_it_carries_even_one_no_retriever_returned() -> None:
    answer = _turn(2, 3, "B", "D1:4", context=["D1:3"])
    question = _turn(9, 2, "A", "D1:3")
    asked: list[tuple[int, list[int]]] = []

    def fetch(doc_id: int, positions: Sequence[int]) -> list[ChunkHit]:
        asked.append((doc_id, list(positions)))
        return [question]

    scores = {2: 1.0}
    assert add_signals("which breed", scores, {2: answer}, fetch) == [question]
    assert asked == [(7, [2])]
    assert scores == {2: 1.0, 9: EARLIER_TURN_SHARE} and 0 < scores[9] < scores[2]


def test_a_reply_gets_a_share_of_the_turn_it_answers_and_shares_are_of_fused_scores() -> None:
    question = _turn(9, 2, "Caroline", "D1:3")
    answer = _turn(2, 3, "Melanie", "D1:4", context=["D1:3"])
    scores = {9: 1.0, 2: 0.5}
    add_signals("what did Caroline ask", scores, {9: question, 2: answer}, _nothing)
    # the question gets the speaker bonus and a share of the answer's fused 0.5, not of its bonus-raised score
    assert scores == {9: 1.0 + SPEAKER_BONUS + EARLIER_TURN_SHARE * 0.5, 2: 0.5 + REPLY_SHARE * 1.0}


def test_a_short_turn_loses_a_little_and_documents_are_left_alone() -> None:
    assert length_cost(FULL_TURN_WORDS) == 0.0 and length_cost(FULL_TURN_WORDS * 3) == 0.0
    assert length_cost(3) < length_cost(10) < 0.0
    wow = _turn(1, 0, "A", "D1:1", words=4)
    plan = _turn(2, 9, "A", "D1:10", words=30)
    page = ChunkHit(3, 8, "notes.md", 1, 0, "short", 0.0, {})
    scores = {1: 0.5, 2: 0.45, 3: 0.4}
    add_signals("q", scores, {1: wow, 2: plan, 3: page}, _nothing)
    assert scores[2] > scores[1] and scores[3] == 0.4
    text, meta = "Ann: Which breed?\n[8 May] Bo: A greyhound.", {"turn_id": "D1:2", "context_ids": ["D1:1"]}
    legacy = ChunkHit(4, 7, "talk", 1, 1, text, 0.0, meta)
    assert turn_words(legacy) == 5  # stored before meta["words"]: its own line counted


def test_a_chunk_at_that_place_that_is_not_the_carried_turn_gets_nothing() -> None:
    answer = _turn(2, 3, "B", "D1:4", context=["D1:3"])
    stranger = _turn(9, 2, "A", "D9:9")  # another document's numbering, say: not the turn the hit carries
    scores = {2: 1.0, 9: 0.2}
    assert add_signals("q", scores, {2: answer, 9: stranger}, _nothing) == []
    assert scores == {2: 1.0, 9: 0.2}
    scores = {2: 1.0}
    assert add_signals("q", scores, {2: answer}, lambda d, p: [stranger]) == []
    assert scores == {2: 1.0}


def test_hybrid_search_returns_the_question_a_matching_answer_replied_to(kb: KnowledgeBase) -> None:
    turns = [
        Turn("Ann", "Morning! How was the weekend?", "D1:1", when="1 May"),
        Turn("Bob", "Which breed did you finally adopt?", "D1:2", when="1 May"),
        Turn("Ann", "A greyhound, she is very fast", "D1:3", when="1 May"),
        Turn("Bob", "Lovely, see you on Monday", "D2:1", when="8 May"),  # the next session: it carries no turn
        *(Turn("Ann", f"Filler remark number {i} about the garden", f"D3:{i}", when="9 May") for i in range(40)),
    ]
    kb.add_conversation("chat", turns)
    ids = [h.chunk.meta["turn_id"] for h in kb.search("greyhound", 2, "hybrid").hits]
    assert ids == ["D1:3", "D1:2"]  # the answer, then the question it answers (no word of the query in it)
    bob = [h.chunk.meta["turn_id"] for h in kb.search("what did Bob adopt", 4, "hybrid").hits]
    assert bob[0] in {"D1:2", "D2:1"}
