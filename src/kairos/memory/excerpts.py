"""Past-conversation excerpts for the context: which rounds, and how the model reads them.

A past session is indexed one round per chunk, each chunk led by the round before it (a reply is
found through what it answers). Retrieved as they are, chunks repeat rounds, come in score order
and may all come from one session. Here the rounds are picked with a per-session quota (a question
that links several past conversations gets each of them), shown once each, oldest first and grouped
by session with its date: a value that changed over time reads in the order it changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # the config reads RECALL: importing this module must not load the retrieval stack
    from kairos.knowledge.base import Hit

RECALL = 12
"""Rounds appended with the key cards by default (about 1,000 tokens of past conversation)."""
PER_SESSION = 2
"""Of those, the best this many of every past session come first by default."""
ROUND_SPEAKER = "session {session_id}"
"""The speaker of an indexed round (``kairos.memory.core`` writes it; the rounds are split on it here)."""


@dataclass(frozen=True, slots=True)
class Round:
    """One round of a past session: a user message and the replies up to the next one."""

    session_id: str
    date: str
    position: int
    text: str


class Excerpt(Protocol):
    """A retrieved past-conversation chunk (:class:`kairos.memory.core.MemoryHit` is one)."""

    text: str
    session_id: str
    date: str
    position: int


def pick(hits: Sequence[Hit], k: int, per_session: int = 0) -> list[Hit]:
    """``k`` of ``hits`` (best first): first the best ``per_session`` of each session, then the best of the rest.

    ``per_session`` 0: the plain top ``k``. Never more than ``k``: with many sessions, the best ones get theirs.
    """
    chosen: set[int] = set()
    taken: dict[str, int] = {}
    for i, hit in enumerate(hits):
        sid = str(hit.chunk.meta.get("session_id", ""))
        if len(chosen) < k and taken.get(sid, 0) < per_session:
            taken[sid] = taken.get(sid, 0) + 1
            chosen.add(i)
    for i in range(len(hits)):
        if len(chosen) >= k:
            break
        chosen.add(i)
    return [hits[i] for i in sorted(chosen)]


def rounds_of(hit: Excerpt) -> list[Round]:
    """The round a chunk holds and the context round ahead of it (when its text has one)."""
    sid, date = hit.session_id, hit.date
    speaker = ROUND_SPEAKER.format(session_id=sid)
    marker = f"[{date}] {speaker}: " if date else f"{speaker}: "
    before, found, current = hit.text.rpartition(marker)
    if not found:  # not written by kairos.memory (another layout): the chunk as one round
        return [Round(sid, date, hit.position, hit.text.strip())]
    out = []
    before = before.strip()
    if before and hit.position > 0:
        out.append(Round(sid, date, hit.position - 1, before.removeprefix(f"{speaker}: ").strip()))
    out.append(Round(sid, date, hit.position, current.strip()))
    return out


def render_rounds(hits: Sequence[Excerpt]) -> list[str]:
    """Lines for the context: each session's chosen rounds once, oldest session first, gaps marked ``…``."""
    by_session: dict[str, dict[int, Round]] = {}
    for hit in hits:
        for r in rounds_of(hit):
            by_session.setdefault(r.session_id, {}).setdefault(r.position, r)
    order = sorted(by_session, key=lambda s: (next(iter(by_session[s].values())).date, s))
    lines: list[str] = []
    for sid in order:
        rounds = [by_session[sid][p] for p in sorted(by_session[sid])]
        lines.append(f"[{rounds[0].date or 'undated'}, session {sid}]")
        previous = None
        for r in rounds:
            if previous is not None and r.position != previous + 1:
                lines.append("  …")
            lines.append("  " + " / ".join(line.strip() for line in r.text.splitlines() if line.strip()))
            previous = r.position
    return lines


__all__ = ["PER_SESSION", "RECALL", "ROUND_SPEAKER", "Excerpt", "Round", "pick", "render_rounds", "rounds_of"]
