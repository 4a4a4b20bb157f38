"""The runtime: a worker per active session, sources in a task group, a bus for front ends (book ch6 §3.2).

Everything that happens becomes an :class:`~kairos.runtime.events.Event` handed to
:meth:`Runtime.submit`. The runtime routes it to a session, lets the router pick a strategy, and
then:

- **queue / interrupt**: posts the matching inbox event (persisted before ``submit`` returns) and
  wakes the session's worker. The worker is the session's single writer: it runs the agent while
  anything is pending, and the runner takes events up at its safe points; an ``interrupt`` event
  preempts the running model stream or tool (placeholder results, cut reply dropped).
- **parallel**: answers the question in a side session at once, publishes the answer, and logs the
  exchange in the main session as "executed in parallel" at its next safe point.
- **drop**: acknowledged, recorded on the bus, not queued (a filter rule).

Workers start on the first event for a session and close after ``idle_close_s`` without work, so
thousands of known sessions cost nothing while idle. Sources (timers, mail, webhooks, file
watches, async tasks) are components run in the runtime's task group; a failing source is logged
and restarted with backoff, never taking the runtime down.

Crash safety: events are in the session database before they are acknowledged; at start the
runtime resumes every session that has pending events or was working when the process died (its
cut turn is closed with placeholder results by :meth:`SessionStore.resume`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from kairos.agent import Agent
from kairos.agent.events import AgentEvent, FinalAnswer
from kairos.context.inbox import InboxEvent, Interrupt, Posted, event_record
from kairos.context.session import Session, SessionStore
from kairos.errors import (
    IdempotencyConflictError,
    KairosError,
    MessageTooLongError,
    SessionBusyError,
    SessionNotFoundError,
)
from kairos.models.types import Message, estimate_tokens
from kairos.runtime.bus import EventBus, SqliteBus
from kairos.runtime.db import RecordDB, RuntimeDB
from kairos.runtime.events import Event, idempotency_key, inbox_event, same_payload
from kairos.runtime.group_commit import GroupCommit
from kairos.runtime.handle import (
    NO_RUNTIME,
    RUNTIME_RESOURCE,
    Component,
    Receipt,
    RuntimeContext,
    RuntimeHandle,
    runtime_handle,
    runtime_service,
)
from kairos.runtime.handlers import Handlers
from kairos.runtime.leader import LeaderLease, lead
from kairos.runtime.outbound import (
    ComponentError,
    EventAccepted,
    EventDropped,
    OutboundPayload,
    SessionCreated,
    SessionRecovered,
)
from kairos.runtime.parallel import answer_in_parallel
from kairos.runtime.session_names import SessionNames
from kairos.runtime.session_worker import BUSY_STALE_S, SessionWorker
from kairos.runtime.urgency import Router, RuleRouter
from kairos.runtime.views import SessionQueries
from kairos.storage import Migration

log = logging.getLogger("kairos.runtime")
T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS active (session TEXT PRIMARY KEY, since REAL NOT NULL);
"""
_MIGRATIONS: tuple[Migration, ...] = (
    _SCHEMA,
    "ALTER TABLE active ADD COLUMN running REAL",  # 2: a running turn's heartbeat (session_worker)
)
"""The runtime's own tables (``kv``, ``active``); 1 is the schema from before versions (kairos.storage)."""


class Runtime(SessionQueries):
    """Runs an agent on many sessions, driven by events; see the module docstring.

    Use as ``async with Runtime(agent, store) as rt:``; ``await rt.submit(event)`` from anywhere in
    the loop (:meth:`submit_threadsafe` from other threads).

    Args:
        agent: the agent every session runs (give it :func:`~kairos.runtime.toolsets.runtime_tools`).
        store: the sessions.
        router: decides strategies (default: the book's rules).
        handlers: the operator's instructions per kind of event, shown after it (default: none).
        background_after_s: a tool call still running after this long continues as an async task
            (needs a :class:`~kairos.runtime.integrations.tasks.TaskManager`; default None, like 0: never).
        bus: where front ends subscribe (default: :class:`SqliteBus` in ``runtime.db``).
        components: event sources and services, started with the runtime.
        idle_close_s: a worker closes its session after this long without work.
        default_session: where events without a session go (default: one kept in ``runtime.db``).
        dispatch: hands a stored event ``(session, seq)`` to the deployment's work queue instead of
            running the session here, unless this process holds it already (``kairos serve --no-worker``,
            ``kairos worker``: :mod:`kairos.runtime.worker`).
        leader: the deployment's leader lease: ``leader_only`` components run only while it is held
            (taken, or retried every ``leader_retry_s``; :mod:`kairos.runtime.leader`). None: always.
    """

    def __init__(
        self,
        agent: Agent,
        store: SessionStore,
        *,
        router: Router | None = None,
        handlers: Handlers | None = None,
        background_after_s: float | None = None,
        bus: EventBus | None = None,
        db: RecordDB | None = None,
        components: list[Component] | None = None,
        idle_close_s: float = 300.0,
        default_session: str | None = None,
        dispatch: Callable[[str, int], None] | None = None,
        leader: LeaderLease | None = None,
        leader_retry_s: float = 5.0,
    ) -> None:
        self.agent = agent
        self.dispatch = dispatch
        self.store = store
        self.db: RecordDB = db or RuntimeDB(store.state_dir / "runtime.db")
        self.db.ensure("runtime", _MIGRATIONS)
        if bus is None:  # the embedded bus is SQLite's, in runtime.db even when the records are elsewhere
            bus = SqliteBus(self.db if isinstance(self.db, RuntimeDB) else RuntimeDB(store.state_dir / "runtime.db"))
        self.bus: EventBus = bus
        self.router: Router = router or RuleRouter()
        self.handlers = handlers or Handlers()
        self.background_after_s = background_after_s
        self.idle_close_s = idle_close_s
        self.components: list[Component] = list(components or [])
        self.accepting = False
        self.leader, self.leader_retry_s, self.leading = leader, leader_retry_s, leader is None
        self.answer_listeners: list[Callable[[str, FinalAnswer], None]] = []
        """Called with (session, final answer) whenever a run ends (the outbox, tests)."""
        self.agent_listeners: list[Callable[[str, AgentEvent], None]] = []
        """Called with (session, event) for every event of a session's runs, unabridged (``kairos chat``)."""
        self.names = SessionNames(self.db, self.has_session, lambda: self.create_session("main"), default_session)
        """The sessions the runtime keeps by name (the default one, an API user's)."""
        self._workers: dict[str, SessionWorker] = {}
        self._group: asyncio.TaskGroup | None = None
        self._side: set[asyncio.Task[None]] = set()
        self._component_tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._known: set[str] = set()
        """Sessions seen to exist (sessions are never deleted, so a hit needs no query)."""
        self._commits = GroupCommit(store.trajectories, self._stored)
        """Events submitted in one loop tick are written in one transaction."""

    # -- life cycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Runtime:
        self._loop = asyncio.get_running_loop()
        self._group = asyncio.TaskGroup()
        await self._group.__aenter__()
        self.accepting = True
        for component in self.components:
            if self.leading or not component.leader_only:
                self._start(component)
        if self.leader is not None:
            led = lead(self.leader, self._start_led, self.leader_retry_s, self._set_leading)
            self._component_tasks.append(self._group.create_task(led, name="leader"))
        try:
            self.recover()
        except BaseException:  # an unreadable database: stop what started, the caller gets the error
            await self.aclose(0)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def add(self, component: Component) -> None:
        """Add a component (started now when the runtime runs)."""
        self.components.append(component)
        if self._group is not None and self.accepting and (self.leading or not component.leader_only):
            self._start(component)

    def _start(self, component: Component) -> asyncio.Task[None]:
        assert self._group is not None
        task = self._group.create_task(self._keep_running(component), name=f"component:{component.name}")
        self._component_tasks.append(task)
        return task

    def _start_led(self) -> list[asyncio.Task[None]]:
        """Start the leader's components (this process took the deployment's leader lease)."""
        return [self._start(c) for c in self.components if c.leader_only] if self.accepting else []

    def _set_leading(self, held: bool) -> None:
        self.leading = held

    def service(self, kind: type[T]) -> T | None:
        """The component of type ``kind``, if one was added."""
        for c in self.components:
            if isinstance(c, kind):
                return c
        return None

    async def _keep_running(self, component: Component) -> None:
        backoff = 1.0
        while self.accepting:
            started = time.monotonic()
            try:
                await component.run(self)
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.exception("runtime component %s failed", component.name)
                self.publish("", ComponentError(component=component.name, message=str(e)))
            backoff = 1.0 if time.monotonic() - started > 60 else min(backoff * 2, 60.0)
            await asyncio.sleep(backoff)

    def recover(self) -> list[str]:
        """Resume sessions with pending events or a turn cut by a crash; returns their ids.

        With :attr:`dispatch`, their pending events go to the work queue instead (a worker that died
        mid-turn left its message unacknowledged: the queue hands it to another one).
        """
        if self.dispatch is not None:
            pending = sorted(self.store.trajectories.sessions_with_pending())
            for sid in pending:
                for e in self.store.trajectories.pending_events(sid):
                    self.dispatch(sid, e.seq)
            return pending
        rows = self.db.read("SELECT session FROM active")
        ids = {str(r[0]) for r in rows}
        ids.update(self.store.trajectories.sessions_with_pending())
        for sid in sorted(ids):
            if not self.store.trajectories.has_session(sid):
                self.db.write("DELETE FROM active WHERE session = ?", (sid,))
                continue
            self.publish(sid, SessionRecovered())
            self._ensure_worker(sid)
        return sorted(ids)

    async def aclose(self, grace_s: float = 10.0) -> None:
        """Stop: no new events; running turns get ``grace_s`` to finish, then are interrupted.

        Everything pending stays in the database for the next start.
        """
        if self._group is None:
            return
        self.accepting = False
        workers = list(self._workers.values())
        for w in workers:
            if w.running and w.session is not None:
                w.session.interrupt("after_turn", reason="the runtime is stopping")
        waits = [w.idle.wait() for w in workers]
        if waits:
            try:
                async with asyncio.timeout(grace_s):
                    await asyncio.gather(*waits)
            except TimeoutError:
                for w in workers:
                    if w.running and w.session is not None:
                        w.session.interrupt(reason="the runtime is stopping")
        tasks = [w.task for w in self._workers.values() if w.task is not None]
        for task in [*self._side, *tasks, *self._component_tasks]:
            task.cancel()
        group, self._group = self._group, None
        with contextlib.suppress(BaseException):
            await group.__aexit__(None, None, None)
        self.bus.close()

    # -- sessions -----------------------------------------------------------------------------

    def default_session(self) -> str:
        """The session events without one go to (created once, then remembered)."""
        return self.names.default()

    def create_session(
        self, title: str = "", meta: dict[str, Any] | None = None, history: Sequence[Message] = ()
    ) -> str:
        """A new session, empty or starting with ``history`` (one transaction).

        ``history`` is a conversation carried over (an OpenAI client's earlier turns); the session has
        no worker until its first event, so nothing else writes to it meanwhile.
        """
        sid = self.store.trajectories.create_session(title, meta, history=history)
        self.publish(sid, SessionCreated(title=title))
        return sid

    def named_session(self, namespace: str, name: str, title: str, meta: dict[str, Any] | None = None) -> str:
        """The session kept for ``name`` in ``namespace`` (an API user, say), created on first use."""
        return self.names.named(namespace, name, lambda: self.create_session(title, meta))

    @property
    def state_dir(self) -> Path:
        """The sessions' state directory (components keep their files below it)."""
        return self.store.state_dir

    @property
    def model_name(self) -> str:
        """The name of the model the agent runs."""
        return str(getattr(self.agent.model, "name", "") or "unknown")

    def open_session(self, session_id: str) -> Session | None:
        """The session as its worker holds it open now (None: no worker has it open), e.g. for its tools' resources."""
        w = self._workers.get(session_id)
        return None if w is None or w.closing else (w.session or w._opened)  # resumed, its task not run yet

    def busy(self, session_id: str) -> bool:
        """Whether the session is working on a turn in this process."""
        w = self._workers.get(session_id)
        return w is not None and w.running

    def session_states(self) -> tuple[set[str], set[str]]:
        """(active, busy): the sessions with a worker, and those running a turn, in any process.

        This process's workers, plus the ``active`` rows whose run heartbeat is fresh: with the
        records on PostgreSQL, what every worker of the deployment is busy with (a dead worker's
        heartbeat goes stale after :data:`~kairos.runtime.session_worker.BUSY_STALE_S`).
        """
        now = time.time()
        rows = self.db.read("SELECT session FROM active WHERE running > ?", (now - BUSY_STALE_S,))
        busy = {str(r[0]) for r in rows} | {sid for sid, w in self._workers.items() if w.running}
        return set(self._workers) | busy, busy

    def active_sessions(self) -> list[str]:
        """Sessions with a worker now."""
        return list(self._workers)

    async def wait_idle(self, session_id: str, timeout_s: float = 60.0) -> None:
        """Until the session has nothing pending and nothing running (tests, ``kairos chat``).

        Raises:
            TimeoutError: still working after ``timeout_s``.
        """
        async with asyncio.timeout(timeout_s):
            while True:
                w = self._workers.get(session_id)
                if w is None:
                    return
                if not w.idle.is_set():
                    await w.idle.wait()
                    continue
                if not w.running and (w.session is None or not len(w.session.inbox)):
                    await asyncio.sleep(0)  # let a run that was just woken start
                    if w.idle.is_set() and not w.running:
                        return
                else:  # woken, not started yet: let the worker take the events
                    await asyncio.sleep(0.005)

    def take(self, session_id: str) -> Literal["held", "resumed", "busy"]:
        """Run the session in this process (its work-queue message came here).

        ``held``: this process holds it already, and queues the events other processes stored
        meanwhile; ``resumed``: opened here now (its lease taken; a turn cut by a dead worker closed
        with placeholders); ``busy``: another process holds it (or it is closing here).

        Raises:
            SessionNotFoundError: no such session.
            StoreError: the store cannot be used.
        """
        w = self._workers.get(session_id)
        if w is not None and not w.closing:
            w.refresh()
            return "held"
        if w is not None or not self.accepting:  # closing here: its lease is not free yet
            return "busy"
        try:
            session = self.store.resume(session_id)
        except SessionBusyError:
            return "busy"
        self._ensure_worker(session_id, session)
        return "resumed"

    def _ensure_worker(self, session_id: str, session: Session | None = None) -> SessionWorker:
        w = self._workers.get(session_id)
        if w is not None and not w.closing:
            return w
        w = SessionWorker(self, session_id, session)
        self._workers[session_id] = w
        if self._group is None:
            raise KairosError("the runtime is not running (use `async with Runtime(...)`)")
        w.task = self._group.create_task(w.work(), name=f"worker:{session_id}")
        return w

    # -- events ---------------------------------------------------------------------------------

    async def submit(self, event: Event) -> Receipt:
        """Route, decide and queue ``event``; durable when this returns (see the module docstring).

        Raises:
            SessionNotFoundError: the event names an unknown session.
            KairosError: the runtime is stopping.
        """
        if not self.accepting:
            raise KairosError("the runtime is stopping; the event was not accepted, send it again later")
        sid = event.session or self.default_session()
        if not self.has_session(sid):
            raise SessionNotFoundError(sid)
        self._check_length(event)
        busy = self.busy(sid)
        decision = await self.router.decide(event, busy=busy)
        strategy = decision.strategy
        if strategy == "drop" or (not busy and event.type == "user.interrupt" and not event.content.strip()):
            reason = decision.reason if strategy == "drop" else "nothing is running"
            self.publish(sid, EventDropped.of(event, sid, strategy, reason))
            return Receipt(sid, "drop", reason)
        accepted = EventAccepted.of(event, sid, strategy, decision.reason)
        if strategy == "parallel":
            side = asyncio.get_running_loop().create_task(answer_in_parallel(self, sid, event), name=f"parallel:{sid}")
            self._side.add(side)
            side.add_done_callback(self._side.discard)
            self.publish(sid, accepted)
            return Receipt(sid, strategy, decision.reason)
        guidance = await self.handlers.guidance(event) if self.handlers.handlers else ""
        posted = inbox_event(event, strategy, guidance)
        key = idempotency_key(sid, event)
        seq = await self._commits.post(sid, posted, key, accepted)
        if seq is None:
            assert key is not None
            if not same_payload(self.store.trajectories.posted_record(key), event_record(posted)):
                raise IdempotencyConflictError(
                    f"the id {event.id[:100]!r} was used before for another request to this session; "
                    "a retry must send the same content (or use a new id)"
                )
            return Receipt(sid, strategy, "duplicate: an event with this id was accepted before", duplicate=True)
        return Receipt(sid, strategy, decision.reason, seq)

    def _check_length(self, event: Event) -> None:
        """Refuse a user message the model's window cannot hold even alone (an estimate: 4 characters a token).

        Taken in, it stayed in the trajectory and every later turn of the session failed on the window.
        """
        model = self.agent.model
        tokens = estimate_tokens(event.content) if event.from_user else 0
        if tokens > model.context_window:
            raise MessageTooLongError(
                f"the message is about {tokens:,} tokens and {model.name} reads at most {model.context_window:,} at "
                "once: save it to a file in the workspace and ask the agent to read it (read_file pages through "
                "long files)"
            )

    def submit_threadsafe(self, event: Event, timeout_s: float = 30.0) -> Receipt:
        """:meth:`submit` from another thread (a mail client, a file watcher); waits for the receipt."""
        if self._loop is None:
            raise KairosError("the runtime is not running")
        return asyncio.run_coroutine_threadsafe(self.submit(event), self._loop).result(timeout_s)

    def has_session(self, session_id: str) -> bool:
        """Whether the session exists."""
        if session_id in self._known:
            return True
        if self.store.trajectories.has_session(session_id):
            self._known.add(session_id)
            return True
        return False

    def post(self, session_id: str, event: InboxEvent, key: str | None = None) -> int | None:
        """Persist an inbox event for a session and wake its worker; None for a duplicate ``key``.

        Synchronous (its own transaction): for components outside a hot path. :meth:`submit` shares
        one commit among everything submitted in the same loop tick.
        """
        w = self._workers.get(session_id)
        if key is None and w is not None and w.session is not None and not w.closing:
            return w.session.post(event)
        done = self.store.trajectories.post_events([(session_id, event.kind, event_record(event), key)])[0]
        if done is None:
            return None
        self._deliver(session_id, Posted(done[0], event, done[1]))
        return done[0]

    def _stored(self, session_id: str, event: InboxEvent, accepted: EventAccepted, posted: tuple[int, float]) -> None:
        """A submitted event is in the session's inbox: say so on the stream, hand it to a worker."""
        self.publish(session_id, accepted.model_copy(update={"seq": posted[0]}))
        self._deliver(session_id, Posted(posted[0], event, posted[1]))

    def _deliver(self, session_id: str, posted: Posted) -> None:
        """Hand a stored event to the session's live worker, or start one."""
        w = self._workers.get(session_id)
        if w is not None and w.session is not None and not w.closing:
            w.session.inbox.add(posted)
        elif self.dispatch is not None:
            self.dispatch(session_id, posted.seq)
        elif self.accepting:
            self._ensure_worker(session_id)

    def interrupt(self, session_id: str, reason: str = "", heard: str | None = None) -> bool:
        """Stop the session's running turn at once (a stop button); False when nothing runs.

        ``heard``: a voice barge-in's played part of the reply; the cut reply is kept only up to there.
        """
        w = self._workers.get(session_id)
        if w is None or not w.running or w.session is None:
            return False
        w.session.post(Interrupt("immediate", reason, heard))
        return True

    def _on_agent_event(self, session_id: str, event: AgentEvent) -> None:
        for listener in list(self.agent_listeners):
            try:
                listener(session_id, event)
            except Exception:
                log.exception("agent listener failed")

    def _on_answer(self, session_id: str, event: FinalAnswer) -> None:
        for listener in list(self.answer_listeners):
            try:
                listener(session_id, event)
            except Exception:
                log.exception("answer listener failed")

    def publish(self, session: str, payload: OutboundPayload) -> None:
        """Put a record on the session's stream (best effort: the trajectory, not the stream, is the record)."""
        try:
            self.bus.publish(session, payload.TYPE, payload.to_data()).attach(payload)  # subscribers run later
        except Exception:  # the stream is best effort; the trajectory is the record
            log.exception("publishing %s failed", payload.TYPE)


__all__ = [
    "NO_RUNTIME",
    "RUNTIME_RESOURCE",
    "Component",
    "Receipt",
    "Runtime",
    "RuntimeContext",
    "RuntimeHandle",
    "runtime_handle",
    "runtime_service",
]
