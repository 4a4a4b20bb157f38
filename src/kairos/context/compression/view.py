"""The ``TrajectoryView`` that shows frozen replacements instead of stored tool results.

A pure function of (stored messages, frozen ledger): the same inputs always give the same
objects back, so the prefix audit and the token memo reuse their work across requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from kairos.context.compression.ledger import state_of
from kairos.context.session import SessionView
from kairos.models.types import Message


def stored_seqs(session: SessionView, messages: Sequence[Message]) -> list[int | None]:
    """The stored sequence number of each message (None for one a previous view made up)."""
    stored = session.message_list()
    if messages is stored or (
        len(messages) == len(stored) and all(a is b for a, b in zip(messages, stored, strict=True))
    ):
        return list(range(len(messages)))
    index = {id(m): i for i, m in enumerate(stored)}
    return [index.get(id(m)) for m in messages]


class CompressionView:
    """Applies the ledger to tool results; every other message passes through untouched.

    When it is given the stored trajectory itself (it is the first view) and no decision was
    frozen since the last call, only the new messages are looked at: the work per request stays
    flat however long the session grows.
    """

    def __init__(self) -> None:
        self._cache: dict[tuple[str, int], tuple[Message, str, Message]] = {}
        self._last: dict[str, tuple[int, int, list[Message]]] = {}
        """session id -> (ledger version, messages seen, the output so far)."""

    def apply(self, session: SessionView, messages: Sequence[Message]) -> Sequence[Message]:
        """The messages with frozen replacements in place of stored tool results."""
        ledger = state_of(session).ledger
        if messages is session.message_list():
            last = self._last.get(session.id)
            if last is not None and last[0] == ledger.version and last[1] <= len(messages):
                out = last[2]
                out.extend(self._shown(session, seq, messages[seq]) for seq in range(last[1], len(messages)))
            else:
                out = [self._shown(session, seq, m) for seq, m in enumerate(messages)]
            self._last[session.id] = (ledger.version, len(messages), out)
            return out
        return self._apply(session, messages)

    def _shown(self, session: SessionView, seq: int, m: Message) -> Message:
        if m.role != "tool":
            return m
        text = state_of(session).ledger.effective(seq)
        return m if text is None or text == m.content else self._replaced(session.id, seq, m, text)

    def _apply(self, session: SessionView, messages: Sequence[Message]) -> Sequence[Message]:
        ledger = state_of(session).ledger
        out: list[Message] | None = None
        for i, seq in enumerate(stored_seqs(session, messages)):
            m = messages[i]
            if seq is None or m.role != "tool":
                continue
            text = ledger.effective(seq)
            if text is None or text == m.content:
                continue
            if out is None:
                out = list(messages)
            out[i] = self._replaced(session.id, seq, m, text)
        return messages if out is None else out

    def _replaced(self, sid: str, seq: int, original: Message, text: str) -> Message:
        """The same replacement object every time, so identity-based memos keep hitting."""
        hit = self._cache.get((sid, seq))
        if hit is not None and hit[0] is original and hit[1] == text:
            return hit[2]
        new = replace(original, content=text, images=())  # a compressed result's screenshot goes too
        self._cache[(sid, seq)] = (original, text, new)
        return new
