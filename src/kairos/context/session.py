"""Sessions: an append-only trajectory, an inbox, and the per-session resources tools need.

Only the agent loop appends to a session (plugins get a read-only :class:`SessionView`), and
only one loop at a time: opening a session for writing takes its lease (see
:mod:`kairos.context.lease`), released by :meth:`Session.aclose`.
"""

from __future__ import annotations

import json
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from kairos.context.inbox import Inbox, InboxEvent, Interrupt, InterruptMode, Posted, event_from_record
from kairos.context.store import Lease, SessionInfo, TrajectoryStore, open_trajectory_store
from kairos.models.types import Message
from kairos.paths import default_state_dir, user_config_dir
from kairos.tools.base import NEWS_PENDING, Slots, ToolContext, ToolResult

INTERRUPTED_TOOL_RESULT = "[interrupted: this tool call was stopped before it finished; its result is unknown]"

Closer = Callable[[], Awaitable[None]]
Spawner = Callable[[str, dict[str, Any]], "Session"]


def early_result_key(call_id: str) -> str:
    """Frozen key of a tool result that finished before an earlier call of the same reply."""
    return f"kairos.result.{call_id}"


EFFECT_STARTED = "kairos.effect.started."
"""Frozen-key prefix: a side-effecting call was about to run (its key, tool and arguments)."""
EFFECT_FINISHED = "kairos.effect.finished."
"""Frozen-key prefix: what that call returned."""


def interrupted_effect_result(key: str) -> str:
    """The placeholder of a side-effecting call cut after it started: its effect may have happened."""
    return (
        "[interrupted: this call has side effects and was stopped after it started, before it reported back "
        f"(idempotency key {key}); its effect may or may not have happened. Check the current state "
        "(read the file, list what was sent) before calling it again, so it is not done twice]"
    )


class SessionView(Protocol):
    """What plugins and views may read of a session. Writes go through the agent loop."""

    @property
    def id(self) -> str:
        """The session id."""
        ...

    @property
    def messages(self) -> Sequence[Message]:
        """A copy of the trajectory."""
        ...

    def message_list(self) -> Sequence[Message]:
        """The live trajectory (read-only by contract; no copy)."""
        ...

    @property
    def request_count(self) -> int:
        """Model requests made so far (across resumes)."""
        ...

    @property
    def state(self) -> Slots:
        """Per-session scratch space of plugins (counters, caches) under typed keys; not persisted."""
        ...

    @property
    def tool_context(self) -> ToolContext:
        """What the session's tools get (workspace, cwd, resources)."""
        ...

    @property
    def workspace(self) -> Path:
        """The workspace root."""
        ...

    def freeze(self, key: str, value: str) -> str:
        """Decide ``value`` once for ``key``; later calls (and resumed sessions) get the first value."""
        ...

    def frozen(self, key: str) -> str | None:
        """The value frozen under ``key``, if any."""
        ...

    def frozen_items(self, prefix: str) -> dict[str, str]:
        """Every value frozen under a key that starts with ``prefix``."""
        ...

    def stored_messages(self, session_id: str) -> list[Message]:
        """The stored messages of a session of the same store (a memory plugin catching up on an earlier one).

        Raises:
            SessionNotFoundError: no such session.
            StoreError: a stored record cannot be read.
        """
        ...


class Session:
    """One conversation. Messages are only ever appended; each append is persisted at once."""

    def __init__(
        self,
        session_id: str,
        store: TrajectoryStore,
        workspace: Path,
        messages: list[Message],
        *,
        pending: list[Posted] | None = None,
        lease: Lease | None = None,
        state_dirs: tuple[Path, ...] = (),
        spawner: Spawner | None = None,
    ) -> None:
        self.id = session_id
        self.store = store
        self._messages = messages
        home = state_dirs[0] if state_dirs else None  # the store's state dir comes first (see SessionStore)
        self.tool_context = ToolContext(workspace=workspace, session_id=session_id, state_dirs=state_dirs, home=home)
        self.request_count = store.count_requests(session_id)
        self.state = Slots()
        """Per-session harness state kept by plug-ins (counters, audit memory) under typed keys; not persisted."""
        self.inbox = Inbox(store, session_id, pending)
        self.tool_context.put(NEWS_PENDING, self.inbox.news_pending)
        self.lease = lease
        self._closers: list[Closer] = []
        self._closed = False
        self._spawner = spawner
        if lease is not None:  # a session dropped without aclose() gives its lease back
            weakref.finalize(self, lease.release)

    @property
    def messages(self) -> Sequence[Message]:
        """A copy of the trajectory."""
        return tuple(self._messages)

    def message_list(self) -> list[Message]:
        """The live list (read-only by contract): avoids a copy per request on long sessions."""
        return self._messages

    def __len__(self) -> int:
        return len(self._messages)

    @property
    def workspace(self) -> Path:
        """The workspace root."""
        return self.tool_context.workspace

    def append(
        self,
        *messages: Message,
        consume: Sequence[int] = (),
        request: dict[str, Any] | None = None,
        created: Sequence[float] = (),
    ) -> None:
        """Persist then append: a crash never leaves memory ahead of disk.

        ``consume`` marks the inbox events these messages were made from, and ``request`` records the
        model request that produced them (its index is :attr:`request_count`), in the same transaction.
        ``created``: the stored times of the first messages (a typed line's is when it was typed).
        """
        if not messages and not consume and request is None:
            return
        req = (self.request_count, request) if request is not None else None
        self.store.append_messages(
            self.id, len(self._messages), messages, consume=consume, request=req, created=created
        )
        self._messages.extend(messages)
        if request is not None:
            self.request_count += 1

    def consume(self, seqs: Sequence[int]) -> None:
        """Mark inbox events done that produce no message (an interrupt)."""
        self.store.consume(self.id, seqs)

    def freeze(self, key: str, value: str) -> str:
        """Decide ``value`` once for ``key``; later calls (and resumed sessions) get the first value."""
        return self.store.freeze(self.id, key, value)

    def frozen(self, key: str) -> str | None:
        """The value frozen under ``key``, if any."""
        return self.store.frozen(self.id, key)

    def frozen_items(self, prefix: str) -> dict[str, str]:
        """Every value frozen under a key that starts with ``prefix`` (one query)."""
        return self.store.frozen_items(self.id, prefix)

    def stored_messages(self, session_id: str) -> list[Message]:
        """The stored messages of a session of the same store."""
        return self.store.load_messages(session_id)

    # -- side effects (the executor's EffectLog: calls not repeated after a crash) -----------

    def effect_started(self, call_id: str, tool: str, arguments: dict[str, Any]) -> str:
        """Record a side-effecting call about to run (kept in the session database); its idempotency key."""
        key = f"{self.id}:{call_id}"
        record = {"key": key, "tool": tool, "arguments": arguments, "at": time.time()}
        self.freeze(EFFECT_STARTED + call_id, json.dumps(record, ensure_ascii=False, default=str))
        return key

    def effect_finished(self, call_id: str, result: ToolResult) -> None:
        """Record what that call returned (a resume after a crash gives it back instead of a placeholder)."""
        self.freeze(EFFECT_FINISHED + call_id, json.dumps({"content": result.content, "is_error": result.is_error}))

    def cut_result(self, call_id: str) -> str:
        """The result a call cut before its result was appended gets (a crash, an interrupt).

        A result that finished is given back (saved early, or recorded by the effect log); a
        side-effecting call that started gets :func:`interrupted_effect_result`; anything else the
        plain placeholder.
        """
        early = self.frozen(early_result_key(call_id))
        if early is not None:
            return early
        finished = self.frozen(EFFECT_FINISHED + call_id)
        if finished is not None:
            try:
                return str(json.loads(finished)["content"])
            except (ValueError, KeyError, TypeError):
                pass
        started = self.frozen(EFFECT_STARTED + call_id)
        if started is not None:
            try:
                key = str(json.loads(started)["key"])
            except (ValueError, KeyError, TypeError):
                key = f"{self.id}:{call_id}"
            return interrupted_effect_result(key)
        return INTERRUPTED_TOOL_RESULT

    def spawn(self, title: str, meta: dict[str, Any]) -> Session:
        """A new session in the same store and workspace (held for writing when the store leases)."""
        if self._spawner is not None:
            return self._spawner(title, meta)
        sid = self.store.create_session(title, meta)
        dirs = self.tool_context.state_dirs
        home = self.tool_context.home
        return Session(sid, self.store, self.workspace, [], state_dirs=(home, *dirs) if home else dirs)

    # -- the inbox --------------------------------------------------------------------------

    def post(self, event: InboxEvent) -> int:
        """Post an event to this session (persisted before it returns; safe from any thread)."""
        return self.inbox.post(event)

    def interrupt(self, mode: InterruptMode = "immediate", reason: str = "") -> None:
        """Ask the running turn to stop (``immediate``: at once, the trajectory stays valid)."""
        self.post(Interrupt(mode, reason))

    def consume_interrupts(self) -> int:
        """Consume every pending interrupt (honoured, or aimed at a run that is over); returns how many.

        Other events stay queued, in order. An interrupt belongs to the run it was aimed at: one
        left when that run ended must not stop the next run (a timer's, or the next process's).
        """
        kept: list[Posted] = []
        done: list[int] = []
        for p in self.inbox.take():
            if isinstance(p.event, Interrupt):
                done.append(p.seq)
            else:
                kept.append(p)
        if kept:
            self.inbox.put_back(kept)
        self.consume(done)
        return len(done)

    # -- lifecycle --------------------------------------------------------------------------

    def on_close(self, closer: Closer) -> None:
        """Run ``closer`` when the session closes (plugins' per-session teardown); last added runs first."""
        self._closers.append(closer)

    async def aclose(self) -> None:
        """Close plugins' per-session state and tool resources, then release the write lease."""
        if self._closed:
            return
        self._closed = True
        try:
            while self._closers:
                await self._closers.pop()()
            await self.tool_context.aclose()
        finally:
            if self.lease is not None:
                self.lease.release()


def open_calls(messages: Sequence[Message]) -> list[tuple[str, str]]:
    """``(id, name)`` of tool calls of the last tool-calling reply that have no result yet."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "assistant" and m.tool_calls:
            answered = {r.tool_call_id for r in messages[i + 1 :] if r.role == "tool"}
            return [(c.id, c.name) for c in m.tool_calls if c.id not in answered]
        if m.role != "tool":
            return []
    return []


class SessionStore:
    """Creates and resumes sessions of one workspace (each opened for writing holds its lease).

    ``db_path`` is the trajectory store: a SQLite file (default ``<state_dir>/kairos.db``),
    ``:memory:``, or a ``postgresql://`` URL (:func:`~kairos.context.store.open_trajectory_store`).
    """

    def __init__(
        self, workspace: Path | str = ".", state_dir: Path | None = None, *, db_path: Path | str | None = None
    ):
        self.workspace = Path(workspace).resolve()
        self.state_dir = state_dir or default_state_dir(self.workspace)
        path = db_path if db_path is not None else self.state_dir / "kairos.db"
        self.trajectories: TrajectoryStore = open_trajectory_store(path)

    def _lease(self, session_id: str) -> Lease:
        lease = self.trajectories.lease(session_id)
        lease.acquire()
        return lease

    def _session(self, sid: str, messages: list[Message], lease: Lease) -> Session:
        """The session with its pending events; interrupts stored before this opening are dropped.

        Whoever opens a session holds its lease, so no run of it is going on: a stored interrupt was
        aimed at a run of an earlier opening (a process that was killed, a worker that closed) and
        must not stop the next one ("Interrupted before the turn started" on a fresh chat).
        """
        pending = []
        dropped = []
        for e in self.trajectories.pending_events(sid):
            if e.kind == Interrupt.kind:
                dropped.append(e.seq)
                continue
            try:
                pending.append(Posted(e.seq, event_from_record(e.kind, e.record), e.posted_at))
            except ValueError:  # a record this version cannot read: consumed, not fatal
                dropped.append(e.seq)
        self.trajectories.consume(sid, dropped)
        return Session(
            sid,
            self.trajectories,
            self.workspace,
            messages,
            pending=pending,
            lease=lease,
            state_dirs=(self.state_dir, user_config_dir()),
            spawner=self.new,
        )

    def new(self, title: str = "", meta: dict[str, Any] | None = None) -> Session:
        """A new session, held for writing."""
        sid = self.trajectories.create_session(title, meta)
        return self._session(sid, [], self._lease(sid))

    def resume(self, session_id: str) -> Session:
        """A stored session, held for writing; a turn cut by a crash is closed first.

        Every tool call without a result gets the result saved on the side when it had finished,
        else a placeholder (appended, so the log stays append-only): see :meth:`Session.cut_result`.

        Raises:
            SessionNotFoundError: unknown id.
            SessionBusyError: another run holds it.
            StoreError: the database or a record is unreadable.
        """
        messages = self.trajectories.load_messages(session_id)
        lease = self._lease(session_id)
        try:
            session = self._session(session_id, messages, lease)
            missing = open_calls(messages)
            if missing:  # finished results saved on the side come back; the rest get a placeholder
                session.append(*(Message.tool(cid, session.cut_result(cid), name) for cid, name in missing))
        except BaseException:
            lease.release()
            raise
        return session

    def open(self, session_id: str | None, title: str = "") -> Session:
        """``resume(session_id)`` when given, else ``new(title)``."""
        return self.resume(session_id) if session_id else self.new(title)

    def list(self, limit: int = 50) -> list[SessionInfo]:
        """Stored sessions, newest first (no lease needed)."""
        return self.trajectories.list_sessions(limit)

    def close(self) -> None:
        """Close the database."""
        self.trajectories.close()
