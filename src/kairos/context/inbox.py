"""A session's inbox: the one way anything gets into a session (book ch6 §3.1-3.3).

Typed events are posted from anywhere (another thread, a signal handler, a timer, a sub-agent),
persisted in the session database before ``post`` returns, and drained by the agent loop at its
safe points (before each model request, and before it would return a final answer). Each event
type says whether it *preempts*: a preempting event stops the running model stream or tool at
once (the trajectory stays valid: partial text kept, placeholder tool results); the others wait
for the next safe point. Interrupt modes: ``immediate`` preempts and ends the run; ``after_tool``
ends it at the next safe point, cutting nothing in flight; ``after_turn`` lets the model finish
its answer, then ends the run without taking up queued events.

Consumption is exactly-once: the messages made from drained events are appended to the
trajectory in the same transaction that marks the events consumed, so after a crash an event
is either in the trajectory or still pending, never both, never lost.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal, Protocol, TypeAlias

InterruptMode: TypeAlias = Literal["immediate", "after_tool", "after_turn"]


@dataclass(frozen=True, slots=True)
class UserInput:
    """What the user typed (or said). Urgent input preempts the running step."""

    text: str
    urgent: bool = False
    cut_reply: str | None = None
    """Voice: the user spoke over the agent's last spoken reply, which was already stored; they heard it
    only up to here. The stored reply is not rewritten (append-only); the model reads this note first."""
    kind: ClassVar[str] = "user_input"

    @property
    def preempts(self) -> bool:
        """Only urgent input cuts the running step short."""
        return self.urgent


@dataclass(frozen=True, slots=True)
class ExternalContent:
    """Content from outside the trust boundary (mail, a web hook, a file drop): data, not instructions."""

    source: str
    """Where it came from, e.g. ``mail: alice@example.com``; shown in the wrapper tag."""
    text: str
    urgent: bool = False
    guidance: str = ""
    """The operator's instructions for it (a configured handler), shown after the wrapper, never inside."""
    kind: ClassVar[str] = "external"

    @property
    def preempts(self) -> bool:
        """Only urgent content (as a classifier or a rule decided) cuts the running step short."""
        return self.urgent


@dataclass(frozen=True, slots=True)
class TaskCompleted:
    """A background task finished: an async tool or a sub-agent."""

    task_id: str
    text: str
    """Its result as the model should read it (a sub-agent's envelope, a tool's output)."""
    source: str = "task"
    """What ran: ``subagent``, ``tool: build`` …"""
    ok: bool = True
    external: bool = False
    """The result carries external content (it is then wrapped as such)."""
    kind: ClassVar[str] = "task_completed"

    @property
    def preempts(self) -> bool:
        """Completions wait for the next safe point."""
        return False


@dataclass(frozen=True, slots=True)
class TimerFired:
    """A timer the agent or the user set went off."""

    name: str
    text: str = ""
    kind: ClassVar[str] = "timer"

    @property
    def preempts(self) -> bool:
        """Timers wait for the next safe point."""
        return False


@dataclass(frozen=True, slots=True)
class Interrupt:
    """Stop the running turn (see the module docstring for the three modes)."""

    mode: InterruptMode = "immediate"
    reason: str = ""
    heard: str | None = None
    """Voice barge-in: the part of the reply the user actually heard. The cut reply is kept only up to
    there, so the model never believes it said what nobody heard (None: keep what was shown). A reply
    stored before the barge-in is marked by the next input instead (:attr:`UserInput.cut_reply`)."""
    kind: ClassVar[str] = "interrupt"

    @property
    def preempts(self) -> bool:
        """Only an immediate interrupt cuts the running step short."""
        return self.mode == "immediate"


@dataclass(frozen=True, slots=True)
class ParallelExchange:
    """A question answered in a side session while this one worked (book ch6 §3.2, parallel strategy)."""

    question: str
    answer: str
    side_session: str = ""
    kind: ClassVar[str] = "parallel"

    @property
    def preempts(self) -> bool:
        """Logged at the next safe point, never cutting the main task short."""
        return False


InboxEvent: TypeAlias = UserInput | ExternalContent | TaskCompleted | TimerFired | Interrupt | ParallelExchange
EVENT_TYPES: dict[str, type[InboxEvent]] = {
    cls.kind: cls for cls in (UserInput, ExternalContent, TaskCompleted, TimerFired, Interrupt, ParallelExchange)
}


def event_record(event: InboxEvent) -> dict[str, Any]:
    """The event's fields as a JSON-able dict (its kind is stored beside it)."""
    names = _FIELD_NAMES.get(type(event))
    if names is None:  # fields(): the ClassVar kind is not one
        names = _FIELD_NAMES[type(event)] = tuple(f.name for f in fields(event))
    return {name: getattr(event, name) for name in names}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
"""Field names per event class (``fields()`` is slow for a per-event path)."""


def event_from_record(kind: str, record: dict[str, Any]) -> InboxEvent:
    """Rebuild an event stored by :func:`event_record`.

    Raises:
        ValueError: an unknown kind or fields that do not fit it.
    """
    cls = EVENT_TYPES.get(kind)
    if cls is None:
        raise ValueError(f"unknown inbox event kind {kind!r}")
    try:
        return cls(**record)
    except TypeError as e:
        raise ValueError(f"bad {kind} event record: {e}") from e


@dataclass(frozen=True, slots=True)
class Posted:
    """An event with its place in the session's inbox."""

    seq: int
    event: InboxEvent
    posted_at: float


def _preempts(event: InboxEvent) -> bool:
    return event.preempts


@dataclass(slots=True)
class Drain:
    """What one safe point takes from the inbox, sorted by the interrupt rules (:meth:`Inbox.drain`)."""

    taken: list[Posted] = field(default_factory=list)
    """Everything that was pending (put it all back if the append fails)."""
    deliver: list[Posted] = field(default_factory=list)
    """Events to append as messages now, in order."""
    held: list[Posted] = field(default_factory=list)
    """Events that wait for the next run (an ``after_turn`` interrupt is in force)."""
    control: list[int] = field(default_factory=list)
    """Interrupts to consume: honoured now, or superseded by a newer input."""
    stop: Interrupt | None = None
    """An interrupt that ends the run at this safe point."""
    after_turn: bool = False
    """An ``after_turn`` interrupt: the run ends when the model answers."""


class InboxStore(Protocol):
    """Persistence of inbox events (the session database; a broker later)."""

    def post_event(self, session_id: str, kind: str, record: dict[str, Any]) -> tuple[int, float]:
        """Store an event; returns its sequence number and timestamp."""
        ...


class Inbox:
    """The pending events of one session. ``post`` is safe from any thread.

    The agent loop takes events at safe points and races running work against
    :meth:`wait_preempt`. Consuming (marking events done in the store) is the loop's job,
    together with appending their messages.
    """

    def __init__(self, store: InboxStore, session_id: str, pending: list[Posted] | None = None) -> None:
        self._store = store
        self._session_id = session_id
        self._lock = threading.Lock()
        self._pending: deque[Posted] = deque(pending or ())
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None
        self.listeners: list[Callable[[Posted], None]] = []
        """Called (in the posting thread) after each post, e.g. to wake a runtime worker."""
        self._watchers: list[tuple[Callable[[InboxEvent], bool], Callable[[], None]]] = []

    def post(self, event: InboxEvent) -> int:
        """Persist ``event``, queue it and wake the loop; returns its sequence number."""
        seq, at = self._store.post_event(self._session_id, event.kind, event_record(event))
        self.add(Posted(seq, event, at))
        return seq

    def add(self, posted: Posted) -> None:
        """Queue an event already persisted (by :meth:`InboxStore.post_event` or a keyed post) and wake the loop."""
        event = posted.event
        with self._lock:
            self._pending.append(posted)
            watchers = [callback for wanted, callback in self._watchers if wanted(event)] if self._watchers else []
        self._wake()
        for watcher in watchers:
            self._call_in_loop(watcher)
        for listener in list(self.listeners):
            listener(posted)

    def bind(self) -> None:
        """Attach to the running event loop (the loop that drains this inbox)."""
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()

    def _wake(self) -> None:
        if self._changed is not None:
            self._call_in_loop(self._changed.set)

    def _call_in_loop(self, fn: Callable[[], object]) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        try:
            if running is loop:  # posted from the loop itself (the runtime's group commit): no self-pipe write
                loop.call_soon(fn)
            else:
                loop.call_soon_threadsafe(fn)
        except RuntimeError:  # that loop is closed; the next bind() attaches a new one
            pass

    def watch_preempt(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` in the loop as soon as a preempting event is pending (at once if one is).

        Cheaper than a task waiting on :meth:`wait_preempt` for code that races every model call.
        Returns the function that stops watching.
        """
        return self.watch(_preempts, callback)

    def watch(self, wanted: Callable[[InboxEvent], bool], callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` in the loop as soon as an event ``wanted`` accepts is pending (at once if one is).

        Returns the function that stops watching.
        """
        entry = (wanted, callback)
        with self._lock:
            self._watchers.append(entry)
            already = any(wanted(p.event) for p in self._pending)
        if already:
            self._call_in_loop(callback)

        def stop() -> None:
            with self._lock:
                if entry in self._watchers:
                    self._watchers.remove(entry)

        return stop

    def pending(self) -> list[Posted]:
        """A copy of what waits, oldest first."""
        with self._lock:
            return list(self._pending)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)

    def take(self) -> list[Posted]:
        """Remove and return everything pending, oldest first (the caller consumes them in the store)."""
        with self._lock:
            out = list(self._pending)
            self._pending.clear()
        return out

    def put_back(self, posted: list[Posted]) -> None:
        """Return taken events to the front, in order (they were not consumed after all)."""
        with self._lock:
            self._pending.extendleft(reversed(posted))
        self._wake()

    def drain(self, *, at_start: bool = False, hold: bool = False, direct_input: bool = False) -> Drain:
        """Take what waits and sort it: what to append now, what waits, which interrupts are spent.

        Interrupts are honoured first. At a run's start (``at_start``), an interrupt posted before
        the newest input targeted the work before it and is superseded (``direct_input``: the run's
        own input, not in the inbox, is newer than everything pending). Once an ``after_turn``
        interrupt is in force (``hold``, or found now), other events wait for the next run: the turn
        finishes with what it had.
        """
        taken = self.take()
        out = Drain(taken)
        newest_input = max((p.seq for p in taken if isinstance(p.event, UserInput)), default=-1)
        if direct_input:
            newest_input = max((p.seq for p in taken), default=0) + 1
        rest: list[Posted] = []
        for p in taken:
            if not isinstance(p.event, Interrupt):
                rest.append(p)
                continue
            out.control.append(p.seq)
            if at_start and p.seq < newest_input:
                continue
            if p.event.mode == "after_turn":
                out.after_turn = True
            elif out.stop is None:
                out.stop = p.event
        if hold or out.after_turn:
            out.held = rest
        else:
            out.deliver = rest
        return out

    def has_messages(self) -> bool:
        """Whether something other than an interrupt waits (the model should see it before answering)."""
        with self._lock:
            return any(not isinstance(p.event, Interrupt) for p in self._pending)

    def interrupt_pending(self) -> bool:
        """Whether an immediate interrupt waits (after a preemption: it ends the run)."""
        with self._lock:
            return any(isinstance(p.event, Interrupt) and p.event.mode == "immediate" for p in self._pending)

    def news_pending(self) -> bool:
        """Whether an interrupt or the user's input waits: a tool of several steps stops before its next one."""
        with self._lock:
            return any(isinstance(p.event, Interrupt | UserInput) for p in self._pending)

    def heard(self) -> str | None:
        """What a pending immediate interrupt says the user heard of the reply (voice barge-in), if it says."""
        with self._lock:
            cuts = [
                p.event.heard for p in self._pending if isinstance(p.event, Interrupt) and p.event.mode == "immediate"
            ]
        return next((h for h in cuts if h is not None), None)

    def preempting(self) -> bool:
        """Whether a pending event asks to cut the running step short."""
        with self._lock:
            return any(p.event.preempts for p in self._pending)

    async def wait_preempt(self) -> None:
        """Return once a preempting event is pending (at once if one already is)."""
        await self._wait_for(self.preempting)

    async def wait(self) -> None:
        """Return once anything is pending."""
        await self._wait_for(lambda: len(self) > 0)

    async def _wait_for(self, ready: Callable[[], bool]) -> None:
        while True:
            if self._changed is None or self._loop is not asyncio.get_running_loop():
                self.bind()
            changed = self._changed
            assert changed is not None
            changed.clear()
            if ready():  # checked after clear(): a post in between sets the flag again
                return
            await changed.wait()
