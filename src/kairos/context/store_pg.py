"""The PostgreSQL :class:`~kairos.context.store.TrajectoryStore`: the same rows as the SQLite file, shared.

Several processes (``kairos serve`` front ends, workers, on several machines) use one database; the
store keeps the promises of :mod:`kairos.context.store` with the server's guarantees:

- An append is one transaction (messages, consumed inbox events, request record); a message seq
  taken by another writer fails the whole append (the primary key) with
  :class:`~kairos.errors.StoreConflictError`.
- Inbox seqs come from a counter row per session (``inbox_seqs``), taken in the posting
  transaction, so concurrent posters never collide; an idempotency key is unique across sessions.
- A session's write lease is a session-level advisory lock on the process's lease connection (one per
  store, whatever the number of sessions held): the server drops the locks when that connection ends —
  ``kill -9`` of the worker included. A process holding 1,000 sessions holds one connection, not 1,000.

Records are stored as the same JSON text as in SQLite (``TEXT``, not ``jsonb``: a frozen value or a
message reads back byte for byte).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from kairos.context.store import SessionInfo, StoredEvent, events_from_rows, messages_from_rows, new_session_id
from kairos.errors import SessionBusyError, SessionNotFoundError, StoreConflictError
from kairos.models.types import Message
from kairos.storage.postgres import CONNECT_TIMEOUT_S, PgDatabase, fault

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    created_at DOUBLE PRECISION NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    meta TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS sessions_created ON sessions (created_at);
CREATE TABLE IF NOT EXISTS messages (
    session_id TEXT NOT NULL REFERENCES sessions(id),
    seq INTEGER NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    record TEXT NOT NULL,
    request TEXT,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE IF NOT EXISTS requests (
    session_id TEXT NOT NULL REFERENCES sessions(id),
    idx INTEGER NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (session_id, idx)
);
CREATE TABLE IF NOT EXISTS frozen (
    session_id TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (session_id, key)
);
CREATE TABLE IF NOT EXISTS inbox (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    posted_at DOUBLE PRECISION NOT NULL,
    kind TEXT NOT NULL,
    record TEXT NOT NULL,
    consumed_at DOUBLE PRECISION,
    key TEXT,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX IF NOT EXISTS inbox_pending ON inbox (session_id) WHERE consumed_at IS NULL;
CREATE UNIQUE INDEX IF NOT EXISTS inbox_key ON inbox (key) WHERE key IS NOT NULL;
CREATE TABLE IF NOT EXISTS inbox_seqs (
    session_id TEXT PRIMARY KEY,
    last INTEGER NOT NULL
);
"""

MIGRATIONS: tuple[str, ...] = (_SCHEMA,)
"""The ``sessions`` owner's versions in a PostgreSQL database (kairos.storage.postgres)."""

_encode = json.JSONEncoder(ensure_ascii=False).encode
_LEASE_KEY = "SELECT hashtextextended('kairos.session:' || %s, 0)"
_HOLDER = (
    "SELECT a.application_name, a.client_addr, a.backend_start FROM pg_locks l JOIN pg_stat_activity a "
    "ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
    "AND ((l.classid::bigint << 32) | l.objid::bigint) = %s LIMIT 1"
)


def _one(conn: Any, sql: str, args: tuple[Any, ...]) -> Any:
    row = conn.execute(sql, args).fetchone()
    assert row is not None
    return row[0]


class _LeaseConnection:
    """The connection a process holds its sessions' advisory locks on (made on the first lease).

    Advisory locks are re-entrant on one connection, so the sessions held are also counted here: a
    second lease of a session this process holds is refused like one held elsewhere. A connection
    that broke took its locks with it; the next lease opens a new one.
    """

    def __init__(self, url: str) -> None:
        self._url = url
        self._conn: Any = None
        self._held: set[int] = set()
        self._lock = threading.Lock()

    def take(self, session_id: str) -> int:
        """Lock ``session_id``; returns its lock key.

        Raises:
            SessionBusyError: another lease (this process or any other) holds it.
            StoreError: the server cannot be reached.
        """
        import psycopg

        with self._lock:
            try:
                conn = self._open()
                key = int(_one(conn, _LEASE_KEY, (session_id,)))
                if key in self._held:
                    raise SessionBusyError(session_id, f"this process (kairos pid {os.getpid()})")
                if not _one(conn, "SELECT pg_try_advisory_lock(%s)", (key,)):
                    raise SessionBusyError(session_id, _holder(conn, key))
            except psycopg.Error as e:
                self._drop()
                raise fault(e, self._url, "the session database") from e
            self._held.add(key)
            return key

    def give(self, key: int) -> None:
        """Unlock ``key`` (a broken connection already lost it)."""
        import psycopg

        with self._lock:
            if key not in self._held:
                return
            self._held.discard(key)
            if self._conn is not None:
                try:
                    self._conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
                except psycopg.Error:
                    self._drop()

    def close(self) -> None:
        """Drop every lock this process holds (closing the connection)."""
        with self._lock:
            self._drop()

    def _open(self) -> Any:
        import psycopg

        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        self._drop()
        command = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv[:3])) or "python"
        name = f"kairos pid {os.getpid()} ({command})"[:63]
        self._conn = psycopg.connect(
            self._url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, application_name=name
        )
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        self._held.clear()  # the server dropped them with the connection
        if conn is not None:
            conn.close()


def _holder(conn: Any, key: int) -> str:
    row = conn.execute(_HOLDER, (key,)).fetchone()
    if row is None:
        return "another kairos process"
    since = row[2].astimezone().strftime("%H:%M:%S") if row[2] is not None else "?"
    return f"{row[0] or 'another client'} at {row[1] or 'local'} (since {since})"


class PgSessionLease:
    """The write lease of one session: ``pg_try_advisory_lock`` on the process's lease connection."""

    def __init__(self, locks: _LeaseConnection, session_id: str) -> None:
        self.session_id = session_id
        self._locks = locks
        self._key: int | None = None

    @property
    def held(self) -> bool:
        """Whether this lease holds the session now."""
        return self._key is not None

    def acquire(self) -> None:
        """Take the session (idempotent for the same lease).

        Raises:
            SessionBusyError: another lease (any process, any machine) holds it.
            StoreError: the server cannot be reached.
        """
        if self._key is None:
            self._key = self._locks.take(self.session_id)

    def release(self) -> None:
        """Give the session back (idempotent)."""
        key, self._key = self._key, None
        if key is not None:
            self._locks.give(key)

    def __del__(self) -> None:  # a session dropped without aclose() must not keep its session locked
        self.release()


class PostgresTrajectoryStore:
    """Trajectories in a PostgreSQL database (``postgresql://USER:PASSWORD@HOST:PORT/DB``).

    Raises:
        StoreError: psycopg is missing (with the install hint), the URL is malformed or the
            server cannot be reached (the message names the URL without its password).
    """

    def __init__(self, url: str, *, max_connections: int = 10) -> None:
        self.url = url
        self._db = PgDatabase(url, "the session database", max_size=max_connections)
        self.path = self._db.shown
        """Where it is, as errors name it (the URL without its password)."""
        self._locks = _LeaseConnection(url)
        try:
            self._db.migrate("sessions", MIGRATIONS)
        except BaseException:
            self._db.close()
            raise

    def close(self) -> None:
        """Close the pool and the lease connection (idempotent): the sessions held here are free."""
        self._locks.close()
        self._db.close()

    def lease(self, session_id: str) -> PgSessionLease:
        """The write lease of ``session_id`` (an advisory lock: one holder across the deployment)."""
        return PgSessionLease(self._locks, session_id)

    # -- sessions --------------------------------------------------------------------------

    def create_session(
        self, title: str = "", meta: dict[str, Any] | None = None, session_id: str | None = None,
        history: Sequence[Message] = (),
    ) -> str:  # fmt: skip
        """A new session, empty or starting with ``history`` (one transaction); returns its id."""
        sid, now = session_id or new_session_id(), time.time()
        with self._db.transaction() as conn:
            conn.execute(
                "INSERT INTO sessions (id, created_at, title, meta) VALUES (%s, %s, %s, %s)",
                (sid, now, title, json.dumps(meta or {})),
            )
            if history:
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO messages (session_id, seq, created_at, record) VALUES (%s, %s, %s, %s)",
                        [(sid, i, now, m.serialized()) for i, m in enumerate(history)],
                    )
        return sid

    def set_title(self, session_id: str, title: str) -> bool:
        """Rename a session; False when there is no such session."""
        with self._db.connection() as conn:
            return conn.execute("UPDATE sessions SET title = %s WHERE id = %s", (title, session_id)).rowcount > 0

    def has_session(self, session_id: str) -> bool:
        """Whether ``session_id`` exists."""
        return bool(self._db.read("SELECT 1 FROM sessions WHERE id = %s", (session_id,)))

    def session_meta(self, session_id: str) -> dict[str, Any]:
        """The meta dict a session was created with ({} for an unknown id)."""
        rows = self._db.read("SELECT meta FROM sessions WHERE id = %s", (session_id,))
        return dict(json.loads(rows[0][0])) if rows else {}

    _INFO = "SELECT s.id, s.created_at, s.title, (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) "

    def list_sessions(self, limit: int = 50) -> list[SessionInfo]:
        """Newest first."""
        rows = self._db.read(self._INFO + "FROM sessions s ORDER BY s.created_at DESC LIMIT %s", (limit,))
        return [SessionInfo(r[0], r[1], r[2], int(r[3])) for r in rows]

    def session_info(self, session_id: str) -> SessionInfo | None:
        """One session's row, or None when there is no such session."""
        rows = self._db.read(self._INFO + "FROM sessions s WHERE s.id = %s", (session_id,))
        return SessionInfo(rows[0][0], rows[0][1], rows[0][2], int(rows[0][3])) if rows else None

    # -- messages --------------------------------------------------------------------------

    def load_messages(self, session_id: str) -> list[Message]:
        """Every message of a session, in order.

        Raises:
            SessionNotFoundError: no such session.
            StoreError: a stored record cannot be read (the session is not resumed half-way).
        """
        if not self.has_session(session_id):
            raise SessionNotFoundError(session_id)
        rows = self._db.read("SELECT seq, record FROM messages WHERE session_id = %s ORDER BY seq", (session_id,))
        return messages_from_rows(rows, session_id, self.path)

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
        """Insert messages at ``first_seq``… and mark inbox events consumed, in one transaction.

        Raises:
            StoreConflictError: a seq is taken already (another writer appended); nothing was written.
        """
        import psycopg

        now = time.time()
        trace = json.dumps(request[1]) if request is not None else None
        rows: list[tuple[str, int, float, str, str | None]] = [
            (session_id, first_seq + i, created[i] if i < len(created) else now, m.serialized(), None)
            for i, m in enumerate(messages)
        ]
        if rows and trace is not None:  # the request's trace rides on the reply it produced: one row
            rows[-1] = (*rows[-1][:4], trace)
        try:
            with self._db.transaction() as conn, conn.cursor() as cur:
                if rows:
                    cur.executemany(
                        "INSERT INTO messages (session_id, seq, created_at, record, request) "
                        "VALUES (%s, %s, %s, %s, %s)",
                        rows,
                    )
                if consume:
                    cur.execute(
                        "UPDATE inbox SET consumed_at = %s WHERE session_id = %s AND seq = ANY(%s)",
                        (now, session_id, list(consume)),
                    )
                if request is not None and not rows:
                    cur.execute(
                        "INSERT INTO requests (session_id, idx, record) VALUES (%s, %s, %s) "
                        "ON CONFLICT (session_id, idx) DO UPDATE SET record = excluded.record",
                        (session_id, request[0], trace),
                    )
        except psycopg.errors.UniqueViolation as e:
            last = first_seq + len(rows) - 1
            raise StoreConflictError(
                f"session {session_id} in {self.path} already has a message at seq {first_seq}..{last} "
                "(another writer appended first); nothing of this append was written"
            ) from e

    def load_requests(self, session_id: str) -> list[dict[str, Any]]:
        """Every request record of a session, in order."""
        old = self._db.read("SELECT record FROM requests WHERE session_id = %s ORDER BY idx", (session_id,))
        new = self._db.read(
            "SELECT request FROM messages WHERE session_id = %s AND request IS NOT NULL ORDER BY seq", (session_id,)
        )
        return [json.loads(r[0]) for r in (*old, *new)]

    def count_requests(self, session_id: str) -> int:
        """How many requests a session made."""
        sql = (
            "SELECT (SELECT COUNT(*) FROM requests WHERE session_id = %s) + "
            "(SELECT COUNT(*) FROM messages WHERE session_id = %s AND request IS NOT NULL)"
        )
        return int(self._db.read(sql, (session_id, session_id))[0][0])

    # -- frozen decisions ------------------------------------------------------------------

    def freeze(self, session_id: str, key: str, value: str) -> str:
        """Store ``value`` under ``key`` unless a value is already frozen; return the frozen one."""
        sql = "INSERT INTO frozen (session_id, key, value) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING RETURNING value"
        if self._db.read(sql, (session_id, key, value)):
            return value
        frozen = self.frozen(session_id, key)
        assert frozen is not None
        return frozen

    def frozen_items(self, session_id: str, prefix: str) -> dict[str, str]:
        """Every frozen value of a session whose key starts with ``prefix`` (one query)."""
        sql = "SELECT key, value FROM frozen WHERE session_id = %s AND substr(key, 1, %s) = %s"
        return {str(k): str(v) for k, v in self._db.read(sql, (session_id, len(prefix), prefix))}

    def frozen(self, session_id: str, key: str) -> str | None:
        """The value frozen under ``key``, if any."""
        rows = self._db.read("SELECT value FROM frozen WHERE session_id = %s AND key = %s", (session_id, key))
        return None if not rows else str(rows[0][0])

    # -- inbox -----------------------------------------------------------------------------

    def post_event(self, session_id: str, kind: str, record: dict[str, Any]) -> tuple[int, float]:
        """Store an inbox event (durable when this returns); its sequence number and time."""
        done = self.post_events([(session_id, kind, record, None)])[0]
        assert done is not None
        return done

    def posted_record(self, key: str) -> dict[str, Any] | None:
        """The record of the inbox event posted under ``key`` (None: no such key)."""
        rows = self._db.read("SELECT record FROM inbox WHERE key = %s", (key,))
        return json.loads(rows[0][0]) if rows else None

    def post_events(
        self, items: Sequence[tuple[str, str, dict[str, Any], str | None]]
    ) -> list[tuple[int, float] | None]:
        """Store several ``(session_id, kind, record, key)`` inbox events in one transaction (group commit).

        One result per item: its ``(seq, time)``, or None when its ``key`` was posted before. Two
        posters racing with one new key both take a seq; the loser's stays unused (a gap, never a reuse).
        """
        now = time.time()
        encoded = [(sid, kind, _encode(record), key) for sid, kind, record, key in items]  # before any write
        out: list[tuple[int, float] | None] = [None] * len(items)
        insert = "INSERT INTO inbox (session_id, seq, posted_at, kind, record, key) VALUES (%s, %s, %s, %s, %s, %s)"
        with self._db.transaction() as conn, conn.cursor() as cur:
            keys = [k for *_, k in encoded if k is not None]
            seen: set[str] = set()
            if keys:
                seen = {str(r[0]) for r in cur.execute("SELECT key FROM inbox WHERE key = ANY(%s)", (keys,))}
            wanted: list[int] = []
            for i, (*_, key) in enumerate(encoded):
                if key is None or key not in seen:
                    wanted.append(i)
                    if key is not None:
                        seen.add(key)  # a key twice in one batch: the first is posted
            counts: dict[str, int] = {}
            for i in wanted:
                counts[encoded[i][0]] = counts.get(encoded[i][0], 0) + 1
            next_seq: dict[str, int] = {}
            for sid in sorted(counts):  # one order for every poster: no deadlock between two batches
                cur.execute(
                    "INSERT INTO inbox_seqs (session_id, last) VALUES (%s, %s) "
                    "ON CONFLICT (session_id) DO UPDATE SET last = inbox_seqs.last + excluded.last RETURNING last",
                    (sid, counts[sid]),
                )
                row = cur.fetchone()
                assert row is not None
                next_seq[sid] = int(row[0]) - counts[sid] + 1
            plain = []
            for i in wanted:
                sid, kind, record, key = encoded[i]
                seq = next_seq[sid]
                next_seq[sid] += 1
                if key is None:
                    plain.append((sid, seq, now, kind, record, key))
                    out[i] = (seq, now)
                elif cur.execute(insert + " ON CONFLICT DO NOTHING", (sid, seq, now, kind, record, key)).rowcount:
                    out[i] = (seq, now)  # else: posted meanwhile by a concurrent batch
            if plain:
                cur.executemany(insert, plain)
        return out

    def pending_events(self, session_id: str) -> list[StoredEvent]:
        """Inbox events not consumed yet, oldest first (unreadable rows are skipped, not fatal)."""
        rows = self._db.read(
            "SELECT seq, kind, record, posted_at FROM inbox WHERE session_id = %s AND consumed_at IS NULL ORDER BY seq",
            (session_id,),
        )
        return events_from_rows(rows)

    def sessions_with_pending(self) -> list[str]:
        """Ids of sessions with inbox events not consumed yet (interrupts do not count: opening drops them)."""
        sql = "SELECT DISTINCT session_id FROM inbox WHERE consumed_at IS NULL AND kind != 'interrupt'"
        return [str(r[0]) for r in self._db.read(sql)]

    def consume(self, session_id: str, seqs: Sequence[int]) -> None:
        """Mark inbox events consumed without appending anything (interrupts, bad records)."""
        if seqs:
            with self._db.connection() as conn:
                conn.execute(
                    "UPDATE inbox SET consumed_at = %s WHERE session_id = %s AND seq = ANY(%s)",
                    (time.time(), session_id, list(seqs)),
                )
