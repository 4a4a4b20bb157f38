"""What the API needs from the outbox (notifications, questions, approvals), as a protocol.

The runtime's outbox (:mod:`kairos.runtime.integrations.outbox`) keeps messages for the user with read/unread
state and open questions (``ask_user``, approvals); the API only lists them, marks them read and
answers questions. Methods may be plain or ``async``: the routes await whatever is awaitable.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from kairos.runtime.integrations.outbox import Outbox

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


class RuntimeOutbox:
    """The runtime's :class:`~kairos.runtime.integrations.outbox.Outbox` as the API sees it: one user's messages.

    Args:
        outbox: the runtime's outbox component.
        user: whose messages the API shows (None: the outbox's default user).
    """

    def __init__(self, outbox: Outbox, user: str | None = None) -> None:
        self.outbox = outbox
        self.user = user

    def messages(self, *, unread_only: bool = False, limit: int = 100) -> list[dict[str, Any]]:
        """Messages for the user, oldest first."""
        return self.outbox.list(self.user, unread_only=unread_only, limit=limit)

    def mark_read(self, ids: Sequence[str]) -> int:
        """Mark messages read; how many were unread."""
        return self.outbox.mark_read(ids, self.user)

    def questions(self, *, open_only: bool = True) -> list[dict[str, Any]]:
        """The user's questions (the open ones by default)."""
        return self.outbox.questions(self.user, pending_only=open_only)

    def answer(self, question_id: str, text: str) -> bool:
        """Answer an open question; False when it is unknown, not the user's or closed.

        Raises:
            ValueError: the text is empty or not one of the question's options.
        """
        q = self.outbox.get(question_id)
        user = self.user or self.outbox.default_user
        if q is None or q["kind"] != "question" or q["user"] != user or q["status"] != "pending":
            return False
        self.outbox.answer(question_id, text, user=user)
        return True


__all__ = ["OutboxAPI", "RuntimeOutbox", "settle"]
