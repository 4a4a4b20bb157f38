"""The contract of trajectory persistence: sessions, messages, per-request records, inbox, frozen values.

:class:`TrajectoryStore` is what the agent loop, the session store and the runtime call; two
backends implement it and pass one conformance suite (``tests/context/test_store_conformance.py``):

- :class:`~kairos.context.store_sqlite.SqliteTrajectoryStore`, the embedded default (one file per
  workspace, ``kairos.db``), and
- :class:`~kairos.context.store_pg.PostgresTrajectoryStore`, PostgreSQL through psycopg 3 (the
  ``scale`` extra), for several processes or machines sharing the sessions of one deployment.

:func:`open_trajectory_store` picks one by its target: a path, or a ``postgresql://`` URL.

What every backend promises:

- Rows are only ever inserted: a message's place (its ``seq``) is taken once; appending at a taken
  place raises :class:`~kairos.errors.StoreConflictError` and writes nothing (a second writer that
  raced the first loses whole).
- :meth:`TrajectoryStore.append_messages` is one transaction: the messages, the inbox events they
  consume and the request record commit together or not at all, so an inbox event is either in the
  trajectory or still pending after a crash — never both, never lost.
- An inbox event posted under an idempotency key is stored once (a redelivered webhook is a no-op).
- A frozen value is written once; later calls get the first value.
- One writer per session at a time: :meth:`TrajectoryStore.lease` (a lock that dies with its holder).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kairos.errors import StoreError
from kairos.models.types import Message


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One row of ``kairos sessions``."""

    id: str
    created_at: float
    title: str
    messages: int


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An inbox row not consumed yet."""

    seq: int
    kind: str
    record: dict[str, Any]
    posted_at: float


def new_session_id() -> str:
    """A fresh session id (what :meth:`TrajectoryStore.create_session` gives when none is asked for)."""
    return uuid.uuid4().hex[:12]


class Lease(Protocol):
    """The write lease of one session: one holder at a time, dropped when its holder dies."""

    session_id: str

    @property
    def held(self) -> bool:
        """Whether this lease holds the session now."""
        ...

    def acquire(self) -> None:
        """Take the session (idempotent for the same lease).

        Raises:
            SessionBusyError: another lease holds it.
            StoreError: the lock cannot be taken (its place is unusable, the server is gone).
        """
        ...

    def release(self) -> None:
        """Give the session back (idempotent)."""
        ...


class TrajectoryStore(Protocol):
    """Sessions and their append-only trajectories, per-request records, inbox and frozen values.

    Safe to share between the sessions and threads of one process. Every method may raise
    :class:`~kairos.errors.StoreError` when the database cannot be used.
    """

    def close(self) -> None:
        """Release the connection(s) (idempotent)."""
        ...

    def lease(self, session_id: str) -> Lease:
        """A write lease on ``session_id``, not taken yet (call ``acquire``)."""
        ...

    # -- sessions
    def create_session(
        self, title: str = "", meta: dict[str, Any] | None = None, session_id: str | None = None,
        history: Sequence[Message] = (),
    ) -> str:  # fmt: skip
        """A new session, empty or starting with ``history`` (one transaction); returns its id."""
        ...

    def set_title(self, session_id: str, title: str) -> bool:
        """Rename a session; False when there is no such session."""
        ...

    def has_session(self, session_id: str) -> bool:
        """Whether ``session_id`` exists."""
        ...

    def session_meta(self, session_id: str) -> dict[str, Any]:
        """The meta dict a session was created with ({} for an unknown id)."""
        ...

    def list_sessions(self, limit: int = 50) -> list[SessionInfo]:
        """Newest first."""
        ...

    def session_info(self, session_id: str) -> SessionInfo | None:
        """One session's row, or None when there is no such session."""
        ...

    # -- messages and per-request records
    def load_messages(self, session_id: str) -> list[Message]:
        """Every message of a session, in order.

        Raises:
            SessionNotFoundError: no such session.
            StoreError: a stored record cannot be read (the session is not resumed half-way).
        """
        ...

    def append_messages(
        self,
        session_id: str,
        first_seq: int,
        messages: Iterable[Message],
        *,
        consume: Sequence[int] = (),
        request: tuple[int, dict[str, Any]] | None = None,
        created: Sequence[float] = (),
    ) -> None:
        """Insert messages at ``first_seq``, ``first_seq + 1``… and mark inbox events consumed, in one transaction.

        ``request`` is ``(index, trace)`` of the model request whose reply is the last message;
        ``created`` gives the first messages their own times (when an event was posted).

        Raises:
            StoreConflictError: a seq is taken already (another writer appended); nothing was written.
        """
        ...

    def load_requests(self, session_id: str) -> list[dict[str, Any]]:
        """Every request record of a session, in order."""
        ...

    def count_requests(self, session_id: str) -> int:
        """How many requests a session made."""
        ...

    # -- frozen decisions
    def freeze(self, session_id: str, key: str, value: str) -> str:
        """Store ``value`` under ``key`` unless a value is already frozen; return the frozen one."""
        ...

    def frozen(self, session_id: str, key: str) -> str | None:
        """The value frozen under ``key``, if any."""
        ...

    def frozen_items(self, session_id: str, prefix: str) -> dict[str, str]:
        """Every frozen value of a session whose key starts with ``prefix``."""
        ...

    # -- inbox
    def post_event(self, session_id: str, kind: str, record: dict[str, Any]) -> tuple[int, float]:
        """Store an inbox event (durable when this returns); its sequence number and time."""
        ...

    def post_events(
        self, items: Sequence[tuple[str, str, dict[str, Any], str | None]]
    ) -> list[tuple[int, float] | None]:
        """Store several ``(session_id, kind, record, key)`` events in one transaction (group commit).

        One result per item: its ``(seq, time)``, or None when its ``key`` was posted before.
        """
        ...

    def posted_record(self, key: str) -> dict[str, Any] | None:
        """The record of the inbox event posted under ``key`` (None: no such key)."""
        ...

    def pending_events(self, session_id: str) -> list[StoredEvent]:
        """Inbox events not consumed yet, oldest first (unreadable rows are skipped, not fatal)."""
        ...

    def sessions_with_pending(self) -> list[str]:
        """Ids of sessions with inbox events not consumed yet (interrupts do not count)."""
        ...

    def consume(self, session_id: str, seqs: Sequence[int]) -> None:
        """Mark inbox events consumed without appending anything (interrupts, bad records)."""
        ...


def messages_from_rows(rows: Iterable[Sequence[Any]], session_id: str, where: object) -> list[Message]:
    """``(seq, record)`` rows as messages; an unreadable one fails the whole load (never resumed half-way).

    Raises:
        StoreError: a stored record cannot be read.
    """
    out = []
    for seq, record in rows:
        try:
            out.append(Message.from_record(json.loads(record)))
        except (ValueError, TypeError, KeyError, IndexError) as e:
            raise StoreError(
                f"message {seq} of session {session_id} in {where} is unreadable ({e}); the session cannot be "
                "resumed as it is. Start a new session; the database itself is left untouched"
            ) from e
    return out


def events_from_rows(rows: Iterable[Sequence[Any]]) -> list[StoredEvent]:
    """``(seq, kind, record, posted_at)`` rows as inbox events; unreadable rows are skipped, not fatal."""
    out = []
    for seq, kind, record, posted_at in rows:
        try:
            data = json.loads(record)
        except ValueError:
            continue
        if isinstance(data, dict):
            out.append(StoredEvent(int(seq), str(kind), data, float(posted_at)))
    return out


def is_store_url(target: Path | str) -> bool:
    """Whether ``target`` names a database server (``postgresql://…``) rather than a file."""
    return str(target).startswith(("postgresql://", "postgres://"))


def open_trajectory_store(target: Path | str) -> TrajectoryStore:
    """The store at ``target``: a SQLite file (or ``:memory:``), or a ``postgresql://`` URL.

    Raises:
        StoreError: it cannot be used (the message names it and says what to do).
    """
    if is_store_url(target):
        from kairos.context.store_pg import PostgresTrajectoryStore

        return PostgresTrajectoryStore(str(target))
    from kairos.context.store_sqlite import SqliteTrajectoryStore

    return SqliteTrajectoryStore(target)
