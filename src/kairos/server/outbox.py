"""What the API needs from the outbox (notifications, questions, approvals), as a protocol.

The runtime's outbox (:mod:`kairos.runtime.outbox`) keeps messages for the user with read/unread
state and open questions (``ask_user``, approvals); the API only lists them, marks them read and
answers questions. Methods may be plain or ``async``: the routes await whatever is awaitable.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")


@runtime_checkable
class OutboxAPI(Protocol):
    """The outbox as the HTTP API uses it (records are JSON-able dicts with at least an ``id``)."""

    def messages(
        self, *, unread_only: bool = False, limit: int = 100
    ) -> list[dict[str, Any]] | Awaitable[list[dict[str, Any]]]:
        """Messages for the user, oldest first."""
        ...

    def mark_read(self, ids: Sequence[str]) -> int | Awaitable[int]:
        """Mark messages read; how many changed."""
        ...

    def questions(self, *, open_only: bool = True) -> list[dict[str, Any]] | Awaitable[list[dict[str, Any]]]:
        """Questions waiting for the user (``ask_user``, approvals)."""
        ...

    def answer(self, question_id: str, text: str) -> bool | Awaitable[bool]:
        """Answer a question; False when it is unknown or already answered (or timed out)."""
        ...


async def settle(value: T | Awaitable[T]) -> T:
    """``value``, awaited when it is awaitable (outbox methods may be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value


__all__ = ["OutboxAPI", "settle"]
