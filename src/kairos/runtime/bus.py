"""The event bus front ends subscribe to: what happens in every session, in order, resumable.

Each published record gets a cursor (a number that only grows). A subscriber passes the last cursor
it saw and gets everything after it, first from storage, then live, with nothing missed or
repeated in between, which is what SSE's ``Last-Event-ID`` and the WebSocket resume id rely on.

:class:`EventBus` is the protocol (a NATS JetStream stream fits it: publish, durable consumer from a
sequence); :class:`SqliteBus` is the embedded default. Records are written in batches once per
event-loop tick: the trajectory (not this stream) is the durable record of a session, so a crash may
lose the last few milliseconds of stream, never a message.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from kairos.runtime.db import RuntimeDB
from kairos.runtime.outbound import OutboundPayload, UnknownPayload, parse_payload
from kairos.storage import Migration

_SCHEMA = """
CREATE TABLE IF NOT EXISTS bus (
    cursor INTEGER PRIMARY KEY,
    session TEXT NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS bus_session ON bus (session, cursor);
"""
_MIGRATIONS: tuple[Migration, ...] = (_SCHEMA,)
"""The bus table's versions; 1 is the schema from before versions (kairos.storage)."""
_encode = json.JSONEncoder(ensure_ascii=False).encode
"""``json.dumps(value, ensure_ascii=False)`` without building an encoder per record."""
_QUEUE_LIMIT = 50_000
"""A subscriber this far behind is cut off; it reconnects with its cursor and loses nothing."""


@dataclass(frozen=True, slots=True)
class BusEvent:
    """One published record; :attr:`payload` is its typed form."""

    cursor: int
    session: str
    type: str
    data: dict[str, Any]
    at: float
    _payload: OutboundPayload | UnknownPayload | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def payload(self) -> OutboundPayload | UnknownPayload:
        """The typed payload (:mod:`kairos.runtime.outbound`), parsed on first use and kept.

        Every subscriber of a live record gets this same object, so a record is parsed once.
        """
        payload = self._payload
        if payload is None:
            payload = parse_payload(self.type, self.data)
            object.__setattr__(self, "_payload", payload)
        return payload

    def attach(self, payload: OutboundPayload) -> None:
        """Keep the payload this record was published from, so live subscribers need not parse ``data``."""
        object.__setattr__(self, "_payload", payload)

    def to_record(self) -> dict[str, Any]:
        """The JSON form sent to clients."""
        return {"cursor": self.cursor, "session": self.session, "type": self.type, "data": self.data, "at": self.at}


_SLOW = BusEvent(0, "", "bus.too_slow", {}, 0.0)
"""Marker put in a subscriber's queue when it is cut off."""


class SubscriberTooSlow(Exception):
    """The subscriber fell too far behind; reconnect from the last cursor seen."""


class EventBus(Protocol):
    """Publish records per session; subscribe to one session or all, from a cursor."""

    def publish(self, session: str, type: str, data: dict[str, Any]) -> BusEvent:
        """Publish a record (call from the event loop's thread)."""
        ...

    def subscribe(self, session: str | None = None, after: int | None = None) -> AsyncIterator[BusEvent]:
        """Records of ``session`` (None: all) with a cursor above ``after`` (None: only new ones)."""
        ...

    def last_cursor(self) -> int:
        """The newest cursor (0 when nothing was published)."""
        ...

    def history(self, session: str | None, after: int, limit: int = 1000) -> list[BusEvent]:
        """Stored records of ``session`` (None: all) after ``after``, oldest first."""
        ...

    def close(self) -> None:
        """Write what is buffered and stop."""
        ...


class SqliteBus:
    """The embedded bus: an in-memory fan-out plus a table in the runtime database."""

    def __init__(self, db: RuntimeDB, *, keep: int = 200_000) -> None:
        self._db = db
        db.ensure("bus", _MIGRATIONS)
        rows = db.read("SELECT MAX(cursor) FROM bus")
        self._cursor = int(rows[0][0] or 0)
        if keep:  # bounded history: resuming from older than this starts at the oldest kept record
            db.write("DELETE FROM bus WHERE cursor <= ?", (self._cursor - keep,))
        self._lock = threading.Lock()
        self._unwritten: list[BusEvent] = []
        self._subscribers: list[tuple[str | None, asyncio.Queue[BusEvent | None]]] = []
        self._flush_scheduled = False

    def last_cursor(self) -> int:
        """The newest cursor."""
        return self._cursor

    def publish(self, session: str, type: str, data: dict[str, Any]) -> BusEvent:
        """Assign the next cursor, hand the record to live subscribers, write it within this tick."""
        with self._lock:
            self._cursor += 1
            event = BusEvent(self._cursor, session, type, data, time.time())
            self._unwritten.append(event)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no loop (a synchronous caller): write now
                self.flush()
        for wanted, queue in list(self._subscribers):
            if wanted is None or wanted == session:
                if queue.qsize() >= _QUEUE_LIMIT:
                    self._drop(queue)
                else:
                    queue.put_nowait(event)
        return event

    def _drop(self, queue: asyncio.Queue[BusEvent | None]) -> None:
        self._subscribers = [(s, q) for s, q in self._subscribers if q is not queue]
        queue.put_nowait(_SLOW)

    def flush(self) -> None:
        """Write buffered records (one transaction)."""
        with self._lock:
            batch, self._unwritten = self._unwritten, []
            self._flush_scheduled = False
        self._db.write_many(
            "INSERT OR IGNORE INTO bus (cursor, session, type, data, at) VALUES (?, ?, ?, ?, ?)",
            [(e.cursor, e.session, e.type, _encode(e.data), e.at) for e in batch],
        )

    def history(self, session: str | None, after: int, limit: int = 1000) -> list[BusEvent]:
        """Stored records after ``after`` (oldest first)."""
        self.flush()
        if session is None:
            rows = self._db.read(
                "SELECT cursor, session, type, data, at FROM bus WHERE cursor > ? ORDER BY cursor LIMIT ?",
                (after, limit),
            )
        else:
            rows = self._db.read(
                "SELECT cursor, session, type, data, at FROM bus"
                " WHERE session = ? AND cursor > ? ORDER BY cursor LIMIT ?",
                (session, after, limit),
            )
        return [BusEvent(int(c), str(s), str(t), json.loads(d), float(a)) for c, s, t, d, a in rows]

    async def subscribe(self, session: str | None = None, after: int | None = None) -> AsyncIterator[BusEvent]:
        """See :meth:`EventBus.subscribe`.

        Raises:
            SubscriberTooSlow: the consumer fell :data:`_QUEUE_LIMIT` records behind.
        """
        queue: asyncio.Queue[BusEvent | None] = asyncio.Queue()
        self._subscribers.append((session, queue))  # live first, so nothing falls between history and live
        try:
            last = self._cursor if after is None else after
            if after is not None:
                while True:
                    page = self.history(session, last)
                    for event in page:
                        last = event.cursor
                        yield event
                    if len(page) < 1000:
                        break
            while True:
                item = await queue.get()
                if item is None:  # the bus closed
                    return
                if item is _SLOW:
                    raise SubscriberTooSlow("the subscriber fell behind; reconnect with the last cursor it saw")
                if item.cursor > last:
                    last = item.cursor
                    yield item
        finally:
            self._subscribers = [(s, q) for s, q in self._subscribers if q is not queue]

    def close(self) -> None:
        """Write what is buffered and end every subscription."""
        self.flush()
        for _, queue in self._subscribers:
            queue.put_nowait(None)
        self._subscribers = []


__all__ = ["BusEvent", "EventBus", "SqliteBus", "SubscriberTooSlow"]
