"""Importance scores and periodic compression (book ch3 §3.6): cluster similar memories, summarise each cluster.

Importance combines the extractor's score (emotional weight, how lasting), time decay, how often
the memory was recalled, and uniqueness (near-duplicates lower it). The seed gives no formula; this
one keeps its ordering: recalled 5 times, 3 days old, emotional and unique scores above recalled
once, 90 days old, plain, with 3 near-duplicates.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from kairos.memory.records import KINDS, MemoryCard
from kairos.models.base import Model, try_complete
from kairos.models.types import Message, ModelRequest, ToolSpec

log = logging.getLogger("kairos.memory")

SIMILAR = 0.75
"""Cosine at or above which two memories belong to one cluster."""
DUPLICATE = 0.9
"""Cosine at or above which two memories count as near-duplicates (each lowers the other's importance)."""
KEEP_IMPORTANCE = 0.8
"""Memories this important (identity, health, key people) are never compressed."""
SUMMARY_TOOL = ToolSpec(
    "summarize_memories",
    "One memory that keeps what the listed memories have in common and every detail still useful.",
    {
        "type": "object",
        "properties": {
            "content": {"type": "string", "maxLength": 600},
            "kind": {"type": "string", "enum": list(KINDS)},
            "importance": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["content", "kind", "importance"],
    },
)
SUMMARY_SYSTEM = (
    "You merge related memories about one user into one. Keep every detail that is still useful (names, "
    'dates, numbers); when they describe a habit, state the general rule ("often asks about rain"). '
    "Do not invent anything. Call summarize_memories."
)


def effective_importance(card: MemoryCard, now: float | None = None, duplicates: int = 0) -> float:
    """The score cards are ranked by (higher is kept and shown first)."""
    now = time.time() if now is None else now
    age_days = max(0.0, (now - (card.valid_from or card.created_at)) / 86400)
    half_life = 90.0 if card.kind == "episodic" else 365.0
    decay = 0.5 ** (age_days / half_life)
    recall = min(0.3, 0.1 * math.log1p(card.accesses))
    return float(card.importance * (0.5 + 0.5 * decay) + recall - 0.1 * duplicates)


def clusters(cards: Sequence[MemoryCard], vectors: Any, *, similar: float = SIMILAR) -> list[list[int]]:
    """Groups (indices into ``cards``) of two or more similar, compressible memories, least important first."""
    order = sorted(range(len(cards)), key=lambda i: effective_importance(cards[i]))
    free = {
        i for i in order
        if cards[i].importance < KEEP_IMPORTANCE and cards[i].format in ("note", "enhanced_note")
    }  # fmt: skip
    vecs = np.asarray(vectors, dtype=np.float32)
    out: list[list[int]] = []
    for i in order:
        if i not in free:
            continue
        free.discard(i)
        sims = vecs @ vecs[i]
        members = [i, *(j for j in sorted(free) if sims[j] >= similar)]
        if len(members) > 1:
            free.difference_update(members)
            out.append(members)
    return out


async def summarize(model: Model, cards: Sequence[MemoryCard], *, timeout_s: float) -> dict[str, Any] | None:
    """The model's merged memory for ``cards`` ({content, kind, importance}), or None when it fails."""
    listing = "\n".join(f"- ({c.kind}, {c.category}) {c.content}" for c in cards)
    request = ModelRequest(SUMMARY_SYSTEM, "", (SUMMARY_TOOL,), (Message.user(listing),), max_tokens=400)
    response, why = await try_complete(model, request, timeout_s)
    if response is None:  # compression is an optimisation: a failure keeps the originals
        log.warning("memory compression failed (%s); memories kept as they are", why)
        return None
    for call in response.message.tool_calls:
        if call.name != SUMMARY_TOOL.name:
            continue
        try:
            args = call.parsed_arguments()
        except ValueError:
            continue
        content, kind, importance = args.get("content"), args.get("kind"), args.get("importance")
        if isinstance(content, str) and content.strip() and kind in KINDS and isinstance(importance, int | float):
            return {"content": content.strip()[:600], "kind": kind, "importance": min(1.0, max(0.0, float(importance)))}
    log.warning("memory compression: no usable summary; memories kept as they are")
    return None


__all__ = ["SUMMARY_TOOL", "clusters", "effective_importance", "summarize"]
