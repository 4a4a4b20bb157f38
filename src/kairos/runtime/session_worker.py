"""The worker of one session in a runtime: its only writer, running the agent whenever something is pending.

It opens (or resumes) the session, marks it active in the runtime's records, waits for inbox events and
runs the agent on them, publishing what happens, and closes the session after the runtime's
``idle_close_s`` without work (its lease goes with it).

While a run goes, its ``active`` row carries a heartbeat (``running``, rewritten every
:data:`HEARTBEAT_S`): with the records on PostgreSQL a front end sees which sessions any worker of
the deployment is busy with, and a dead worker's session stops counting as busy once its heartbeat
is older than :data:`BUSY_STALE_S`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from kairos.agent.events import FinalAnswer, RunError
from kairos.context.inbox import Posted, event_from_record
from kairos.context.session import Session
from kairos.runtime.handle import RUNTIME_RESOURCE, RuntimeHandle
from kairos.runtime.outbound import AgentError, RunEnded, RunStarted, SessionError
from kairos.runtime.records import agent_record
from kairos.tools.executor import BACKGROUND_RESOURCE

if TYPE_CHECKING:
    from kairos.runtime.runtime import Runtime

log = logging.getLogger("kairos.runtime")

HEARTBEAT_S = 10.0
"""How often a running turn rewrites its heartbeat in the ``active`` row."""
BUSY_STALE_S = 3 * HEARTBEAT_S
"""A heartbeat older than this is a dead worker's: the session is not busy."""


class SessionWorker:
    """Runs the agent on one session whenever something is pending; the session's only writer."""

    def __init__(self, runtime: Runtime, session_id: str, session: Session | None = None) -> None:
        self.runtime = runtime
        self.session_id = session_id
        self.session: Session | None = None
        self._opened = session
        self.known: set[int] = set()
        """Inbox seqs this worker has had in its inbox (:meth:`refresh` adds only the others)."""
        self.running = False
        self.closing = False
        self.idle = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def work(self) -> None:
        """Open the session, run the agent while anything is pending, close it when idle or stopping."""
        rt = self.runtime
        try:
            self.session = session = self._opened if self._opened is not None else rt.store.resume(self.session_id)
        except Exception as e:  # busy elsewhere, unreadable: report, keep its events for later
            rt.publish(self.session_id, SessionError(message=f"cannot open the session: {e}"))
            rt._workers.pop(self.session_id, None)
            return
        self._opened = None
        self.known.update(p.seq for p in session.inbox.pending())
        session.inbox.listeners.append(lambda posted: self.known.add(posted.seq))
        handle = RuntimeHandle(rt, self.session_id)
        session.tool_context.put(RUNTIME_RESOURCE, handle)
        session.tool_context.put(BACKGROUND_RESOURCE, handle)
        rt.db.write(
            "INSERT INTO active (session, since) VALUES (?, ?) "
            "ON CONFLICT (session) DO UPDATE SET since = excluded.since, running = NULL",
            (self.session_id, time.time()),
        )
        backoff = 0.0
        try:
            while True:
                self.idle.set()
                if not await self._wait(session, backoff):
                    break
                self.idle.clear()
                failed = await self._run(session)
                backoff = min(60.0, max(1.0, backoff * 2)) if failed and len(session.inbox) else 0.0
        finally:
            self.closing = True
            self.running = False
            try:
                await session.aclose()
            finally:
                rt.db.write("DELETE FROM active WHERE session = ?", (self.session_id,))
                rt._workers.pop(self.session_id, None)
                self.idle.set()
                if rt.accepting and rt.store.trajectories.pending_events(self.session_id):
                    rt._ensure_worker(self.session_id)  # posted while it closed: start again

    def refresh(self) -> None:
        """Queue the session's stored events this worker has not seen (posted by another process)."""
        session = self.session
        if session is None or self.closing:
            return
        for e in self.runtime.store.trajectories.pending_events(self.session_id):
            if e.seq in self.known:
                continue
            try:
                event = event_from_record(e.kind, e.record)
            except ValueError:  # a record this version cannot read: the next opening consumes it
                continue
            session.inbox.add(Posted(e.seq, event, e.posted_at))

    async def _heartbeat(self) -> None:
        """Mark the run in the ``active`` row now and every :data:`HEARTBEAT_S` until it ends."""
        while True:
            self._mark_running(time.time())
            await asyncio.sleep(HEARTBEAT_S)

    def _mark_running(self, at: float | None) -> None:
        """The run's heartbeat (None: no run); best effort, the turn does not depend on it."""
        try:
            self.runtime.db.write("UPDATE active SET running = ? WHERE session = ?", (at, self.session_id))
        except Exception:
            log.exception("marking session %s as running failed", self.session_id)

    async def _wait(self, session: Session, backoff: float) -> bool:
        """Until something is pending (after ``backoff`` seconds when the last run failed); False: close."""
        if backoff:
            await asyncio.sleep(backoff)
        try:
            async with asyncio.timeout(self.runtime.idle_close_s):
                await session.inbox.wait()
        except TimeoutError:
            return len(session.inbox) > 0
        return True

    async def _run(self, session: Session) -> bool:
        """One run of the agent; True when it ended in an error (the events stay pending)."""
        rt = self.runtime
        self.running = True
        failed = False
        rt.publish(self.session_id, RunStarted(pending=len(session.inbox)))
        heartbeat = asyncio.create_task(self._heartbeat(), name=f"heartbeat:{self.session_id}")
        try:
            async for event in rt.agent.run(session):
                rt._on_agent_event(self.session_id, event)
                if isinstance(event, RunError):
                    failed = True
                payload = agent_record(event)
                if payload is not None:
                    rt.publish(self.session_id, payload)
                if isinstance(event, FinalAnswer):
                    rt._on_answer(self.session_id, event)
        except Exception as e:  # a bug must not kill the worker: the session stays valid
            log.exception("run of session %s failed", self.session_id)
            rt.publish(self.session_id, AgentError(message=f"internal error: {e}"))
            failed = True
        finally:
            self.running = False
            heartbeat.cancel()
            self._mark_running(None)
            # an interrupt belongs to the run it was aimed at: one posted too late for it (Ctrl-C as
            # the answer ended, the runtime stopping) must not end the next run before it starts
            try:
                session.consume_interrupts()
            except Exception:  # the database failed: the next opening of the session drops them
                log.exception("dropping the interrupts left by a run of session %s failed", self.session_id)
            rt.publish(self.session_id, RunEnded(pending=len(session.inbox)))
        return failed


__all__ = ["SessionWorker"]
