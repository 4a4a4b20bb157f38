from __future__ import annotations

import pytest

from kairos.knowledge.chunking import (
    ChunkSpec,
    Turn,
    conversation_chunks,
    estimate_tokens,
    fixed_chunks,
    structure_chunks,
)


def test_fixed_chunks_have_the_size_and_overlap_asked_for() -> None:
    words = [f"w{i:04d}" for i in range(3000)]
    chunks = fixed_chunks(" ".join(words), size=256, overlap=0.15)
    assert len(chunks) > 5
    assert all(estimate_tokens(c.text) <= 256 for c in chunks)
    assert [c.position for c in chunks] == list(range(len(chunks)))
    first, second = chunks[0].text.split(), chunks[1].text.split()
    shared = len(set(first) & set(second))
    assert 0.10 * len(first) <= shared <= 0.20 * len(first)
    assert chunks[-1].text.split()[-1] == words[-1]  # nothing lost at the end
    assert set(words) == {w for c in chunks for w in c.text.split()}


def test_structure_chunks_follow_headings_and_carry_their_path() -> None:
    text = "# Guide\n\nIntro paragraph.\n\n## Install\n\nRun pip.\n\nThen run it.\n\n## Usage\n\nCall the tool.\n"
    chunks = structure_chunks(text, size=256)
    assert [c.meta["section"] for c in chunks] == ["# Guide", "# Guide > ## Install", "# Guide > ## Usage"]
    assert chunks[1].text == "# Guide > ## Install\n\nRun pip.\n\nThen run it."


def test_a_paragraph_larger_than_the_size_is_split() -> None:
    big = " ".join(f"word{i}" for i in range(2000))
    chunks = structure_chunks(f"# Big\n\n{big}", size=256)
    assert len(chunks) > 3 and all(c.text.startswith("# Big\n\n") for c in chunks)


def test_conversation_chunks_are_one_per_turn_with_id_speaker_and_date() -> None:
    turns = [Turn("Ann", "Hi!", "D1:1", 100.0, "8 May 2023"), Turn("Bo", "Hello", "D1:2")]
    chunks = conversation_chunks(turns)
    assert [c.text for c in chunks] == ["[8 May 2023] Ann: Hi!", "Bo: Hello"]
    assert chunks[0].meta == {"turn_id": "D1:1", "speaker": "Ann", "words": 5} and chunks[0].valid_from == 100.0


def test_conversation_chunks_carry_the_turn_before_within_a_session() -> None:
    turns = [
        Turn("Ann", "Which breed is he?", "D1:1", 100.0, "8 May"),
        Turn("Bo", "A greyhound.", "D1:2", 100.0, "8 May"),
        Turn("Bo", "New day!", "D2:1", 200.0, "9 May"),
    ]
    chunks = conversation_chunks(turns, context_turns=1)
    assert [c.text for c in chunks] == [
        "[8 May] Ann: Which breed is he?",
        "Ann: Which breed is he?\n[8 May] Bo: A greyhound.",
        "[9 May] Bo: New day!",  # another session: nothing carried over
    ]
    assert chunks[1].meta["context_ids"] == ["D1:1"] and "context_ids" not in chunks[2].meta
    assert chunks[1].meta["words"] == 5  # its own line only: "[8 May] Bo: A greyhound."


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"size": 100}, "256–1024"), ({"overlap": 0.5}, "0.10–0.20"), ({"strategy": "magic"}, "fixed")],
)
def test_chunk_specs_outside_the_ranges_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ChunkSpec(**kwargs)  # type: ignore[arg-type]


def test_empty_text_has_no_chunks() -> None:
    assert fixed_chunks("   \n ") == [] and structure_chunks("\n\n") == []


def test_a_word_longer_than_a_chunk_is_cut() -> None:
    chunks = fixed_chunks("start " + "x" * 5000 + " end", size=256)
    assert all(len(c.text) <= 256 * 4 + 10 for c in chunks)
    assert "".join(c.text for c in chunks).count("x") >= 5000
