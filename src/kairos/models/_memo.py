"""Per-message memoisation for an append-only trajectory.

Messages are immutable and the trajectory only grows, so a value computed for message ``i``
(its serialisation, its token count) stays valid while the same object sits at ``i``.
Checking that is one C-level identity scan; only new or replaced messages are recomputed.
This keeps per-turn harness cost flat as sessions grow to thousands of messages.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from itertools import compress
from typing import Generic, TypeVar

from kairos.models.types import Message

T = TypeVar("T")


def identical_prefix(prev: Sequence[object], cur: Sequence[object]) -> int:
    """Length of the longest prefix whose elements are the same objects (or equal ones) in both sequences."""
    n = min(len(prev), len(cur))
    # Fast path for the common case (nothing replaced): list equality runs in C and checks identity
    # first, so for the same objects it never calls __eq__ (equal copies count as kept: same values).
    if list(prev[:n]) == list(cur[:n]):
        return n
    # map/compress run in C too: the first non-identical index without a Python-level loop
    return next(compress(range(n), map(operator.is_not, prev, cur)), n)


class MessageMemo(Generic[T]):
    """Caches ``fn(message)`` for the messages of consecutive requests."""

    def __init__(self, fn: Callable[[Message], T]) -> None:
        self.fn = fn
        self.messages: list[Message] = []
        self.values: list[T] = []

    def update(self, messages: Sequence[Message]) -> int:
        """Point the memo at ``messages``; returns how many cached values were reused."""
        keep = identical_prefix(self.messages, messages)
        del self.messages[keep:], self.values[keep:]
        tail = messages[keep:]
        self.messages.extend(tail)
        self.values.extend(self.fn(m) for m in tail)
        return keep
