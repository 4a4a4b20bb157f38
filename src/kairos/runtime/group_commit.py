"""Group commit: the events submitted in one loop tick are stored in one transaction.

A webhook burst or a busy front end submits many events per tick; one commit for all of them keeps
the store's fsyncs (SQLite) or round trips (PostgreSQL) per tick instead of per event, and every
sender still waits until its own event is durable before it is acknowledged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kairos.context.inbox import InboxEvent, event_record
from kairos.context.store import TrajectoryStore
from kairos.runtime.outbound import EventAccepted

Stored = Callable[[str, InboxEvent, EventAccepted, tuple[int, float]], None]
"""Called for each event stored (not for a duplicate key) with its ``(seq, posted_at)``."""


class GroupCommit:
    """Batches :meth:`post` calls of one loop tick into one ``post_events`` transaction."""

    def __init__(self, store: TrajectoryStore, stored: Stored) -> None:
        self.store = store
        self.stored = stored
        self._batch: list[tuple[str, InboxEvent, str | None, EventAccepted, asyncio.Future[int | None]]] = []

    async def post(self, session_id: str, event: InboxEvent, key: str | None, accepted: EventAccepted) -> int | None:
        """Store ``event`` with this tick's others; its ``seq``, or None for a duplicate ``key``.

        Raises:
            Exception: the store's error when the batch could not be written (nothing of it was).
        """
        fut: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._batch.append((session_id, event, key, accepted, fut))
        if len(self._batch) == 1:
            asyncio.get_running_loop().call_soon(self._flush)
        return await fut

    def _flush(self) -> None:
        batch, self._batch = self._batch, []
        if not batch:
            return
        try:
            results = self.store.post_events([(s, e.kind, event_record(e), k) for s, e, k, *_ in batch])
        except Exception as e:  # nothing of the batch was stored: every sender gets the error
            for *_, fut in batch:
                if not fut.done():
                    fut.set_exception(e)
            return
        for (sid, event, _, accepted, fut), done in zip(batch, results, strict=True):
            if done is not None:
                self.stored(sid, event, accepted, done)
            if not fut.done():
                fut.set_result(None if done is None else done[0])
