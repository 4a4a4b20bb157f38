"""Timers: one-shot, interval and cron wake-ups the agent sets for itself, and a heartbeat (book ch6 §1.3, ch4 §3.2x).

A timer belongs to the session that set it and wakes that session with a ``timer.trigger`` event
(a :class:`~kairos.context.inbox.TimerFired` in its inbox). Timers live in the ``timers_timers``
table of the runtime's database, so they survive restarts: a one-shot whose time passed while
kairos was down fires once at start, marked late; an interval or cron timer that missed runs
fires once, not once per missed run.

One scheduler task sleeps until the earliest due time (a heap) and is woken when timers change,
so 10,000 timers cost a heap entry and a row each, not a task each. Each fire's event id is
``timer:<id>:<due time>``: the runtime queues an id once, so a fire repeated after a crash (the
event was accepted, the next due time not yet saved) is not delivered twice.

In a deployment of several workers the scheduler runs on the leader only
(:mod:`kairos.runtime.leader`), but the tools work on every worker: a worker that does not run it writes
and deletes rows in the shared records and bumps a change counter
(:class:`~kairos.runtime.leader.ChangeCounter`); the scheduler reads it every ``sync_s`` and reloads the
table when another process changed it.

The clock is injectable (``now`` and ``sleep``); :class:`kairos.testing.clock.ManualClock` is the test double.
"""

from __future__ import annotations

import asyncio
import builtins
import heapq
import itertools
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from kairos.errors import KairosError, SessionNotFoundError
from kairos.runtime.db import RecordDB
from kairos.runtime.events import Event
from kairos.runtime.handle import RuntimeContext
from kairos.runtime.leader import ChangeCounter
from kairos.storage import Migration
from kairos.tools.base import Tool

log = logging.getLogger("kairos.runtime.integrations.timers")
T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS timers_timers (
    id TEXT PRIMARY KEY,
    session TEXT NOT NULL,
    message TEXT NOT NULL,
    kind TEXT NOT NULL,
    every_s REAL NOT NULL DEFAULT 0,
    cron TEXT NOT NULL DEFAULT '',
    timezone TEXT NOT NULL DEFAULT 'UTC',
    next_due REAL NOT NULL,
    created REAL NOT NULL,
    fired INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS timers_by_session ON timers_timers (session);
"""
MIGRATIONS: tuple[Migration, ...] = (SCHEMA, ChangeCounter("timers").migration())
"""The ``timers`` tables' versions in ``runtime.db``; 1 is the schema from before versions (kairos.storage),
2 the change counter other workers bump."""
TimerKind = Literal["once", "interval", "cron"]
MAX_DELAY_S = 10 * 366 * 86400.0
"""The farthest a timer may be set (ten years)."""
_MAX_SLEEP_S = 60.0
"""The scheduler looks at the clock at least this often (a wall-clock jump is noticed within it)."""
_RETRY_S = 5.0
_COLUMNS = "id, session, message, kind, every_s, cron, timezone, next_due, created, fired"
HEARTBEAT_ID = "heartbeat"


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class Timer:
    """One timer as stored (times are epoch seconds)."""

    id: str
    session: str | None
    """The owner; None only for the heartbeat (the runtime's default session)."""
    message: str
    kind: TimerKind
    next_due: float
    every_s: float = 0.0
    cron: str = ""
    timezone: str = "UTC"
    created: float = 0.0
    fired: int = 0
    late: bool = False
    """Its due time passed while the runtime was down (set at restore, cleared by the fire)."""
    wake_at: float = 0.0
    """When the scheduler looks at it next (the due time, or a retry after a failed submit)."""

    def schedule(self) -> str:
        """``once``, ``every 60 s`` or ``cron '0 9 * * 5' (Europe/Paris)``: what the model reads."""
        if self.kind == "interval":
            return f"every {self.every_s:g} s"
        if self.kind == "cron":
            return f"cron {self.cron!r} ({self.timezone})"
        return "once"

    def to_record(self) -> dict[str, Any]:
        """The JSON form (``list_timers``, the HTTP API)."""
        return {
            "timer_id": self.id,
            "session": self.session,
            "message": self.message,
            "kind": self.kind,
            "schedule": self.schedule(),
            "next_due": _iso(self.next_due),
            "fired": self.fired,
        }


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ValueError(f"timezone {name!r} is not a known IANA time zone (e.g. 'UTC', 'Europe/Paris')") from e


def _cron_next(expr: str, tz: str, after: float) -> float:
    """The first run of ``expr`` (in ``tz``) strictly after ``after``."""
    base = datetime.fromtimestamp(after, _zone(tz))
    return float(croniter(expr, base).get_next(datetime).timestamp())


class Timers:
    """The timers component (``name = "timers"``); also the service the timer tools use.

    Args:
        now: the clock (aware datetimes); default real UTC time.
        sleep: an async sleep matching ``now`` (:class:`~kairos.testing.clock.ManualClock` in tests).
        heartbeat_s: when set, a ``heartbeat`` event goes to the runtime's default session this often
            (its strategy is the router's: queue by default). Off by default.
        heartbeat_message: the heartbeat's text.
        min_interval_s: the shortest interval (and cron period) allowed.
        max_per_session: a session may hold at most this many timers.
    """

    name = "timers"
    leader_only = True  # one scheduler per deployment (a leader lease)

    def __init__(
        self,
        *,
        now: Callable[[], datetime] | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        heartbeat_s: float | None = None,
        heartbeat_message: str = "Heartbeat: check whether anything needs attention; do nothing if not.",
        min_interval_s: float = 1.0,
        max_per_session: int = 1000,
        sync_s: float = 2.0,
    ) -> None:
        if heartbeat_s is not None and not heartbeat_s >= min_interval_s:
            raise ValueError(f"heartbeat_s must be at least {min_interval_s:g} s")
        self._now = now or _utc_now
        self._sleep = sleep or asyncio.sleep
        self.heartbeat_s = heartbeat_s
        self.heartbeat_message = heartbeat_message
        self.min_interval_s = min_interval_s
        self.max_per_session = max_per_session
        self.sync_s = sync_s
        self._changes = ChangeCounter("timers")
        self._runtime: RuntimeContext | None = None
        self._timers: dict[str, Timer] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._counter = itertools.count()
        self._wake = asyncio.Event()
        self._ready = asyncio.Event()

    # -- life cycle -------------------------------------------------------------------------------

    async def run(self, runtime: RuntimeContext) -> None:
        """Restore the stored timers, then fire them as they come due (until cancelled)."""
        runtime.db.ensure("timers", MIGRATIONS)
        self._restore(runtime)
        self._runtime = runtime
        self._ready.set()
        try:
            while True:
                self._wake.clear()
                self._sync(runtime)
                await self._fire_due(runtime)
                await self._wait()
        finally:
            self._ready.clear()
            self._runtime = None

    async def wait_ready(self, timeout_s: float = 10.0) -> None:
        """Until :meth:`run` has restored the timers (tests; tools run later anyway)."""
        async with asyncio.timeout(timeout_s):
            await self._ready.wait()

    def _restore(self, runtime: RuntimeContext) -> None:
        self._timers.clear()
        self._heap.clear()
        now = self._now().timestamp()
        self._changes.read(runtime.db)
        for t in _rows(runtime.db, ""):
            t.late = t.next_due < now - 1.0
            self._push(t, t.next_due)
        if self.heartbeat_s:
            self._push(Timer(HEARTBEAT_ID, None, self.heartbeat_message, "interval", now + self.heartbeat_s,
                             self.heartbeat_s), now + self.heartbeat_s)  # fmt: skip

    def _sync(self, runtime: RuntimeContext) -> None:
        """Take in the timers another worker set or cancelled since the last look (one small read)."""
        if not self._changes.changed(runtime.db):
            return
        stored = {t.id: t for t in _rows(runtime.db, "")}
        for tid in [tid for tid in self._timers if tid != HEARTBEAT_ID and tid not in stored]:
            del self._timers[tid]  # cancelled elsewhere (its heap entry goes stale)
        for tid, t in stored.items():
            if tid not in self._timers:
                self._push(t, t.next_due)

    def _push(self, t: Timer, when: float) -> None:
        t.wake_at = when
        self._timers[t.id] = t
        first = not self._heap or when < self._heap[0][0]
        heapq.heappush(self._heap, (when, next(self._counter), t.id))
        if first:
            self._wake.set()

    def _stale(self, entry: tuple[float, int, str]) -> bool:
        t = self._timers.get(entry[2])
        return t is None or t.wake_at != entry[0]

    async def _wait(self) -> None:
        """Until the earliest timer is due or the timers change."""
        while self._heap and self._stale(self._heap[0]):
            heapq.heappop(self._heap)  # cancelled or rescheduled: dropped lazily
        waits: list[asyncio.Task[Any]] = [asyncio.ensure_future(self._wake.wait())]
        if self.sync_s > 0:  # other workers' changes, on the real clock (they do not share an injected one)
            waits.append(asyncio.ensure_future(asyncio.sleep(self.sync_s)))
        if self._heap:
            waits.append(asyncio.ensure_future(self._sleep_until(self._heap[0][0])))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    async def _sleep_until(self, deadline: float) -> None:
        # the delay is measured when the task starts, so a clock moved meanwhile is not missed
        delay = min(deadline - self._now().timestamp(), _MAX_SLEEP_S)
        if delay > 0:
            await self._sleep(delay)

    async def _fire_due(self, runtime: RuntimeContext) -> None:
        now = self._now().timestamp()
        while self._heap and self._heap[0][0] <= now:
            when, _, tid = heapq.heappop(self._heap)
            t = self._timers.get(tid)
            if t is None or t.wake_at != when:
                continue
            outcome = await self._fire(runtime, t)
            if outcome == "stopping":
                self._push(t, when)
                return
            if outcome == "retry":
                self._push(t, now + _RETRY_S)
                continue
            if outcome == "gone":
                self._drop(runtime, t)
                continue
            t.fired += 1
            t.late = False
            if t.kind == "once":
                self._drop(runtime, t)
                continue
            t.next_due = self._following(t, self._now().timestamp())
            if t.id != HEARTBEAT_ID:
                runtime.db.write(
                    "UPDATE timers_timers SET next_due = ?, fired = ? WHERE id = ?", (t.next_due, t.fired, t.id)
                )
            self._push(t, t.next_due)

    def _following(self, t: Timer, now: float) -> float:
        """The next due time after a fire: missed runs are skipped, not fired one by one."""
        if t.kind == "interval":
            return t.next_due + t.every_s * (math.floor(max(now - t.next_due, 0.0) / t.every_s) + 1)
        return _cron_next(t.cron, t.timezone, max(now, t.next_due))

    async def _fire(self, runtime: RuntimeContext, t: Timer) -> Literal["ok", "gone", "retry", "stopping"]:
        due = _iso(t.next_due)
        context: dict[str, Any]
        if t.id == HEARTBEAT_ID:
            source, context, key = {"type": "heartbeat"}, {"due": due}, f"heartbeat:{due}"
            event = Event("heartbeat", t.message, source, "timer", context, None, key)
        else:
            content = t.message
            if t.late:
                missed = "; it fires once for all the runs it missed" if t.kind != "once" else ""
                content += f"\n\n(late: this timer was due at {due} while the runtime was not running{missed})"
            context = {"timer": t.id, "schedule": t.schedule(), "due": due, "late": t.late}
            source, key = {"type": "timer", "timer_id": t.id}, f"timer:{t.id}:{due}"
            event = Event("timer.trigger", content, source, "timer", context, t.session, key)
        try:
            await runtime.submit(event)
        except SessionNotFoundError:
            log.warning("timer %s belongs to session %s, which no longer exists: removed", t.id, t.session)
            return "gone"
        except KairosError:
            if not runtime.accepting:
                return "stopping"
            log.exception("timer %s could not be delivered; retrying", t.id)
            return "retry"
        except Exception:
            log.exception("timer %s could not be delivered; retrying", t.id)
            return "retry"
        return "ok"

    def _drop(self, runtime: RuntimeContext, t: Timer) -> None:
        self._timers.pop(t.id, None)
        if t.id != HEARTBEAT_ID:
            runtime.db.write("DELETE FROM timers_timers WHERE id = ?", (t.id,))

    # -- the service ----------------------------------------------------------------------------

    def _records(self, caller: RuntimeContext | None) -> RecordDB:
        """Where timers are kept: the scheduler's records here, else the caller's.

        A worker that is not the leader shares its records with the leader's scheduler.
        """
        if self._runtime is not None:
            return self._runtime.db
        if caller is None:
            raise KairosError("the timers component is not running (add it to the runtime's components)")
        caller.db.ensure("timers", MIGRATIONS)
        return caller.db

    def add(
        self,
        session: str,
        message: str,
        *,
        at: str | datetime = "",
        after_s: float = 0,
        every_s: float = 0,
        cron: str = "",
        timezone: str = "UTC",
        caller: RuntimeContext | None = None,
    ) -> Timer:
        """Set a timer for ``session``: exactly one of ``at``, ``after_s``, ``every_s`` and ``cron``.

        ``at`` is an ISO 8601 time (without an offset it is read in ``timezone``); ``cron`` is a
        5-field (or 6-field, seconds last) expression read in ``timezone``. ``caller``: the calling
        session's runtime, whose records are used where the scheduler runs in another process (the leader).

        Raises:
            ValueError: what is wrong with the arguments, naming the field.
            KairosError: the component is not running.
        """
        records = self._records(caller)
        if not message.strip():
            raise ValueError("message must say what to do when the timer fires")
        chosen = [n for n, v in (("at", at), ("after_s", after_s), ("every_s", every_s), ("cron", cron)) if v]
        if len(chosen) != 1:
            got = ", ".join(chosen) or "none"
            raise ValueError(f"give exactly one of at, after_s, every_s, cron (got: {got})")
        tz = _zone(timezone)
        now = self._now().timestamp()
        kind: TimerKind = "once"
        if at:
            due = self._parse_at(at, tz, now)
        elif after_s:
            due = now + self._seconds("after_s", after_s, 0.0)
        elif every_s:
            kind = "interval"
            every_s = self._seconds("every_s", every_s, self.min_interval_s)
            due = now + every_s
        else:
            kind = "cron"
            due = self._check_cron(cron.strip(), timezone, now)
        count = records.read("SELECT COUNT(*) FROM timers_timers WHERE session = ?", (session,))[0][0]
        if count >= self.max_per_session:
            raise ValueError(f"this session already has {count} timers; cancel some first (cancel_timer)")
        t = Timer(f"tm-{uuid.uuid4().hex[:10]}", session, message, kind, due, float(every_s or 0), cron.strip(),
                  timezone, time.time())  # fmt: skip
        records.write(
            "INSERT INTO timers_timers (id, session, message, kind, every_s, cron, timezone, next_due, created) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (t.id, session, message, kind, t.every_s, t.cron, timezone, due, t.created),
        )
        if self._runtime is not None:
            self._push(t, due)
        else:
            self._changes.bump(records)  # the leader's scheduler takes it in at its next look
        return t

    def _seconds(self, field: str, value: float, minimum: float) -> float:
        if not math.isfinite(value) or value <= 0 or value > MAX_DELAY_S:
            raise ValueError(f"{field} must be a positive number of seconds up to {MAX_DELAY_S:g} (got {value!r})")
        if value < minimum:
            raise ValueError(f"{field} must be at least {minimum:g} s (got {value:g})")
        return float(value)

    def _parse_at(self, at: str | datetime, tz: ZoneInfo, now: float) -> float:
        if isinstance(at, str):
            try:
                when = datetime.fromisoformat(at.strip())
            except ValueError as e:
                raise ValueError(f"at must be an ISO 8601 time such as '2026-05-01T09:00:00+02:00' (got {at!r})") from e
        else:
            when = at
        if when.tzinfo is None:
            when = when.replace(tzinfo=tz)
        due = when.timestamp()
        if due <= now:
            raise ValueError(f"at {when.isoformat()} is in the past (now is {_iso(now)}); use a future time")
        if due - now > MAX_DELAY_S:
            raise ValueError("at is more than ten years ahead")
        return due

    def _check_cron(self, expr: str, timezone: str, now: float) -> float:
        if not croniter.is_valid(expr):
            raise ValueError(
                f"cron {expr!r} is not a valid cron expression; use 5 fields 'minute hour day month weekday', "
                "e.g. '0 9 * * 5' for Fridays at 09:00"
            )
        try:
            first = _cron_next(expr, timezone, now)
            second = _cron_next(expr, timezone, first)
        except Exception as e:  # croniter gives up on dates that never come (e.g. 30 February)
            raise ValueError(f"cron {expr!r} never fires: {e}") from e
        if second - first < self.min_interval_s:
            raise ValueError(f"cron {expr!r} fires more often than every {self.min_interval_s:g} s")
        return first

    def cancel(self, timer_id: str, session: str | None = None, caller: RuntimeContext | None = None) -> bool:
        """Remove a timer (only ``session``'s own when given); False when there is no such timer."""
        records = self._records(caller)
        rt = self._runtime
        if rt is None:
            where = "id = ? AND id != ?" + ("" if session is None else " AND session = ?")
            args = (timer_id, HEARTBEAT_ID) + (() if session is None else (session,))
            gone = records.write(f"DELETE FROM timers_timers WHERE {where}", args)
            if gone:
                self._changes.bump(records)
            return bool(gone)
        t = self._timers.get(timer_id)
        if t is None or t.id == HEARTBEAT_ID or (session is not None and t.session != session):
            return False
        self._drop(rt, t)
        return True

    def list(self, session: str | None = None, caller: RuntimeContext | None = None) -> builtins.list[Timer]:
        """The timers of ``session`` (all when None), soonest first; the heartbeat is not listed."""
        if self._runtime is None and caller is not None:
            stored = _rows(
                self._records(caller),
                "" if session is None else "WHERE session = ?",
                () if session is None else (session,),
            )
            return sorted(stored, key=lambda t: t.next_due)
        timers = [t for t in self._timers.values() if t.id != HEARTBEAT_ID and session in (None, t.session)]
        return sorted(timers, key=lambda t: t.next_due)


def _rows(db: RecordDB, where: str, args: tuple[Any, ...] = ()) -> builtins.list[Timer]:
    timers = []
    for r in db.read(f"SELECT {_COLUMNS} FROM timers_timers {where}", args):
        t = Timer(str(r[0]), str(r[1]), str(r[2]), r[3], float(r[7]), float(r[4]), str(r[5]), str(r[6]))
        t.created, t.fired = float(r[8]), int(r[9])
        timers.append(t)
    return timers


def tools() -> list[Tool]:
    """The timer tools: set_timer, cancel_timer, list_timers."""
    from kairos.runtime.integrations._timers_tools import timer_tools  # the tools import this module

    return timer_tools()


__all__ = ["SCHEMA", "Timer", "Timers", "tools"]
