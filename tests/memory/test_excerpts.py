"""Past-conversation excerpts: a per-session quota, each round once, oldest session first."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from kairos.knowledge import HashEmbedder
from kairos.knowledge.base import Hit
from kairos.knowledge.store import ChunkHit
from kairos.memory import UserMemory
from kairos.memory.core import MemoryHit
from kairos.memory.excerpts import pick, render_rounds, rounds_of
from kairos.models.types import Message


def hit(session: str, position: int, score: float = 1.0) -> Hit:
    chunk = ChunkHit(position, 1, f"conversation/alice/{session}", 1, position, "", score, {"session_id": session})
    return Hit(chunk, score)


def test_the_quota_brings_every_session_in_and_keeps_the_rank_order() -> None:
    hits = [hit("a", i) for i in range(5)] + [hit("b", 9)]
    assert [(h.chunk.meta["session_id"], h.chunk.position) for h in pick(hits, 3)] == [("a", 0), ("a", 1), ("a", 2)]
    quota = pick(hits, 3, per_session=1)
    assert [(h.chunk.meta["session_id"], h.chunk.position) for h in quota] == [("a", 0), ("a", 1), ("b", 9)]
    assert pick(hits, 1, per_session=2) == hits[:1]  # never more than k
    assert [h.chunk.meta["session_id"] for h in pick([hit(s, 0) for s in "abcdef"], 3, 1)] == ["a", "b", "c"]
    assert pick([], 5, 2) == []


def excerpt(session: str, date: str, position: int, text: str) -> MemoryHit:
    return MemoryHit("conversation", text, 1.0, None, session, date, True, position)


def test_a_chunk_splits_into_its_round_and_the_round_before_it() -> None:
    text = (
        "session s1: user: Which seat?\nassistant: 12C is free.\n"
        "[2024-11-10] session s1: user: Take it.\nassistant: Done."
    )
    before, current = rounds_of(excerpt("s1", "2024-11-10", 7, text))
    assert (before.position, before.text) == (6, "user: Which seat?\nassistant: 12C is free.")
    assert (current.position, current.text) == (7, "user: Take it.\nassistant: Done.")
    (alone,) = rounds_of(excerpt("s1", "2024-11-10", 0, "some other layout"))
    assert (alone.position, alone.text) == (0, "some other layout")


def test_rounds_show_once_oldest_session_first_with_gaps_marked() -> None:
    def chunk(position: int, before: str, now: str, session: str = "new", date: str = "2024-09-26") -> MemoryHit:
        text = f"session {session}: {before}\n[{date}] session {session}: {now}"
        return excerpt(session, date, position, text)

    lines = render_rounds(
        [
            chunk(5, "user: r4", "user: r5 new reference WT-89089"),  # best hit first
            chunk(4, "user: r3", "user: r4"),
            chunk(9, "user: r8", "user: r9"),
            chunk(2, "user: r1", "user: r2 reference WT-89045", session="old", date="2024-09-15"),
        ]
    )
    assert lines == [
        "[2024-09-15, session old]",
        "  user: r1",
        "  user: r2 reference WT-89045",
        "[2024-09-26, session new]",
        "  user: r3",
        "  user: r4",
        "  user: r5 new reference WT-89089",
        "  …",
        "  user: r8",
        "  user: r9",
    ]


async def test_the_cards_message_gets_rounds_of_every_past_session_in_order(tmp_path: Path) -> None:
    mem = UserMemory.open(tmp_path / ".kairos", HashEmbedder(), None, user="alice")
    try:
        filler = [m for i in range(6) for m in (Message.user(f"Wire question {i}?"), Message.assistant("Noted."))]
        first = [
            Message.user("Wire $85,000 on October 1, reference WT-89045."),
            Message.assistant("Scheduled."),
            *filler,
        ]
        second = [Message.user("I renewed my passport for the trip."), Message.assistant("Good, it expires 2034.")]
        await mem.ingest_session(first, session_id="wire", at=datetime(2024, 9, 15, tzinfo=UTC))
        await mem.ingest_session(second, session_id="passport", at=datetime(2024, 9, 26, tzinfo=UTC))
        plain = await mem.past_conversations("wire question reference", 3)
        assert {h.session_id for h in plain} == {"wire"}
        mixed = await mem.past_conversations("wire question reference", 3, per_session=1)
        assert {h.session_id for h in mixed} == {"wire", "passport"}
        text = mem.render_cards([], mixed)
        assert text.index("session wire]") < text.index("session passport]")  # oldest first
        assert "expires 2034" in text and text.count("Wire $85,000") <= 1
    finally:
        mem.close()
