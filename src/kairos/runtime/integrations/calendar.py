"""A small calendar the agent can check and add to (book ch6 Exp 6-1: "is this meeting free?").

Events live in the runtime's database (``calendar_events``), so they survive restarts. Times are
ISO 8601; a time without a zone is taken as UTC. Stored times are normalised to UTC, so overlap
is a string comparison in SQL.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from kairos.errors import KairosError
from kairos.runtime.db import RecordDB
from kairos.runtime.integrations.mail import effect_key
from kairos.runtime.runtime import runtime_handle
from kairos.storage import Migration
from kairos.tools.base import Tool, ToolContext, ToolResult
from kairos.tools.function import tool

SCHEMA = """
CREATE TABLE IF NOT EXISTS calendar_events (
    id TEXT PRIMARY KEY, title TEXT NOT NULL, start TEXT NOT NULL, "end" TEXT NOT NULL,
    key TEXT UNIQUE, created REAL NOT NULL);
CREATE INDEX IF NOT EXISTS calendar_events_start ON calendar_events (start);
"""
MIGRATIONS: tuple[Migration, ...] = (SCHEMA,)
"""The ``calendar`` tables' versions in ``runtime.db``; 1 is the schema from before versions (kairos.storage)."""


class CalendarError(KairosError):
    """A bad time or range; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class CalendarEvent:
    """One entry: ``start`` and ``end`` are UTC ISO strings."""

    id: str
    title: str
    start: str
    end: str

    def describe(self) -> str:
        """``title (start – end)``."""
        return f"{self.title} ({self.start} – {self.end})"


def parse_time(text: str) -> str:
    """ISO 8601 → a UTC ISO string (``2026-12-01T14:00:00+00:00``).

    Raises:
        CalendarError: not an ISO 8601 date or time.
    """
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise CalendarError(
            f"{text!r} is not an ISO 8601 time such as 2026-12-01T14:00 or 2026-12-01T14:00+01:00"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).isoformat()


class Calendar:
    """The calendar in a runtime database."""

    def __init__(self, db: RecordDB) -> None:
        self.db = db
        db.ensure("calendar", MIGRATIONS)

    @staticmethod
    def _range(start: str, end: str) -> tuple[str, str]:
        s, e = parse_time(start), parse_time(end)
        if e <= s:
            raise CalendarError(f"the end ({end}) must be after the start ({start})")
        return s, e

    def overlapping(self, start: str, end: str) -> list[CalendarEvent]:
        """Entries that overlap ``[start, end)``."""
        s, e = self._range(start, end)
        rows = self.db.read(
            'SELECT id, title, start, "end" FROM calendar_events WHERE start < ? AND "end" > ? ORDER BY start', (e, s)
        )
        return [CalendarEvent(str(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in rows]

    def add(self, title: str, start: str, end: str, key: str | None = None) -> tuple[CalendarEvent, bool]:
        """Add an entry; with a key already used, the earlier entry (and False: nothing added)."""
        s, e = self._range(start, end)
        title = " ".join(title.split())[:200] or "(untitled)"
        if key:
            rows = self.db.read('SELECT id, title, start, "end" FROM calendar_events WHERE key = ?', (key,))
            if rows:
                r = rows[0]
                return CalendarEvent(str(r[0]), str(r[1]), str(r[2]), str(r[3])), False
        event = CalendarEvent(uuid.uuid4().hex[:12], title, s, e)
        added = self.db.write(  # a key taken meanwhile (another worker, the same event again): theirs stands
            'INSERT INTO calendar_events (id, title, start, "end", key, created) VALUES (?, ?, ?, ?, ?, ?) '
            "ON CONFLICT DO NOTHING",
            (event.id, title, s, e, key, time.time()),
        )
        if not added:  # the key's entry is read back (or, without one, an id collision: a new id)
            return self.add(title, start, end, key)
        return event, bool(added)


def _calendar(ctx: ToolContext) -> Calendar | ToolResult:
    handle = runtime_handle(ctx)
    return handle if isinstance(handle, ToolResult) else Calendar(handle.runtime.db)


@tool(read_only=True)
def check_calendar(start: str, end: str, *, ctx: ToolContext) -> ToolResult:
    """List calendar entries between two times, to find conflicts before accepting a meeting.

    Args:
        start: ISO 8601 start, e.g. 2026-12-01T14:00 (UTC unless a zone is given).
        end: ISO 8601 end.
    """
    cal = _calendar(ctx)
    if isinstance(cal, ToolResult):
        return cal
    try:
        found = cal.overlapping(start, end)
    except CalendarError as e:
        return ToolResult(str(e), is_error=True)
    if not found:
        return ToolResult(f"free: no calendar entries between {start} and {end}")
    return ToolResult("conflicts: " + "; ".join(e.describe() for e in found))


@tool(side_effects=True)
def add_calendar_event(title: str, start: str, end: str, *, ctx: ToolContext) -> ToolResult:
    """Add an entry to the calendar.

    Args:
        title: what it is.
        start: ISO 8601 start, e.g. 2026-12-01T14:00 (UTC unless a zone is given).
        end: ISO 8601 end.
    """
    cal = _calendar(ctx)
    if isinstance(cal, ToolResult):
        return cal
    key = effect_key(ctx)
    try:
        clashes = cal.overlapping(start, end)
        event, added = cal.add(title, start, end, key)
    except CalendarError as e:
        return ToolResult(str(e), is_error=True)
    text = f"added {event.describe()} (id {event.id})" if added else f"already added: {event.describe()}"
    clashes = [c for c in clashes if c.id != event.id]
    if clashes:
        text += "; it overlaps " + "; ".join(c.describe() for c in clashes)
    return ToolResult(text)


def tools() -> list[Tool]:
    """The calendar tools the model gets."""
    return [check_calendar, add_calendar_event]


__all__ = ["Calendar", "CalendarError", "CalendarEvent", "add_calendar_event", "check_calendar", "parse_time", "tools"]
