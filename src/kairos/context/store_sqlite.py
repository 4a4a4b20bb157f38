"""The embedded :class:`~kairos.context.store.TrajectoryStore`: append-only trajectories in SQLite (WAL).

Rows are only ever inserted: a session's messages are the ordered ``messages`` rows (a model reply
carries the trace of the request that produced it in its row), and
decisions that must survive a resume byte for byte (spill previews, compression summaries)
go to ``frozen``, written once and never updated. Inbox events go to ``inbox`` when posted and
are marked consumed in the same transaction that appends the messages made from them.

A database that cannot be read (corrupt, truncated, not a database, its folder a file) raises
:class:`~kairos.errors.StoreError` with what to do (:mod:`kairos.storage` opens it and names it in
every error); it is never replaced or rewritten.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from kairos.context.lease import SessionLease
from kairos.context.store import SessionInfo, StoredEvent, events_from_rows, messages_from_rows, new_session_id
from kairos.errors import ConfigError, SessionNotFoundError, StoreConflictError, StoreError
from kairos.models.types import Message
from kairos.paths import ensure_state_dir
from kairos.storage import Migration, connect, migrate

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    meta TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS messages (
    session_id TEXT NOT NULL REFERENCES sessions(id),
    seq INTEGER NOT NULL,
    created_at REAL NOT NULL,
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
    posted_at REAL NOT NULL,
    kind TEXT NOT NULL,
    record TEXT NOT NULL,
    consumed_at REAL,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX IF NOT EXISTS inbox_pending ON inbox (session_id, consumed_at);
"""


def _add_late_columns(db: sqlite3.Connection) -> None:
    """Version 2: the columns that came after the first schema, on a file that predates them.

    ``messages.request`` (a reply's trace moved next to it) and ``inbox.key`` (idempotency keys).
    """
    if "request" not in {row[1] for row in db.execute("PRAGMA table_info(messages)")}:
        db.execute("ALTER TABLE messages ADD COLUMN request TEXT")
    if "key" not in {row[1] for row in db.execute("PRAGMA table_info(inbox)")}:
        db.execute("ALTER TABLE inbox ADD COLUMN key TEXT")
    db.execute("CREATE UNIQUE INDEX IF NOT EXISTS inbox_key ON inbox (key) WHERE key IS NOT NULL")


MIGRATIONS: tuple[Migration, ...] = (_SCHEMA, _add_late_columns)
"""The ``sessions`` owner's versions in ``kairos.db`` (kairos.storage.migrations)."""


_encode = json.JSONEncoder(ensure_ascii=False).encode
"""``json.dumps(value, ensure_ascii=False)`` without building an encoder per call (per-event paths)."""


_LAST_SEQ_LIMIT = 100_000
"""Sessions whose newest inbox seq is remembered (past this the memory starts over)."""


class SqliteTrajectoryStore:
    """One SQLite file per workspace; safe to share between sessions and threads of one process.

    Its leases are ``flock``s on files in ``locks/`` beside the database (per store for ``:memory:``).

    Raises:
        StoreError: the file or its folder cannot be used (see the module docstring).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            try:  # one place words what is wrong with the state folder (a file in the way, a broken link)
                ensure_state_dir(self.path.parent)
            except ConfigError as e:
                raise StoreError(str(e)) from e
        self._lock = threading.Lock()
        self._last_seq: dict[str, int] = {}
        """Newest inbox seq per session as this connection last saw it (group commits skip a query per
        session); valid while no other connection has committed: see ``PRAGMA data_version``."""
        self._last_seq_version = -1
        # every error about the file, now or in any later statement, names it (kairos.storage)
        self._db = connect(path, "the session database")
        try:
            migrate(self._db, "sessions", MIGRATIONS)
            self._db.execute("SELECT COUNT(*) FROM sessions").fetchone()
        except StoreError:
            self._db.close()
            raise

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self._db.close()

    def lease(self, session_id: str) -> SessionLease:
        """The write lease of ``session_id``: a lock file in ``locks/`` beside the database."""
        lock_dir = None if str(self.path) == ":memory:" else self.path.parent / "locks"
        return SessionLease(lock_dir, session_id, owner=id(self))

    def _read(self, sql: str, args: Sequence[Any]) -> list[Any]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def _write(self, statements: Sequence[tuple[str, Sequence[Any], bool]]) -> None:
        """Run ``(sql, args, many)`` statements in one transaction.

        A single one-row statement is already atomic on its own (autocommit), so it skips the
        explicit BEGIN/COMMIT: two round trips fewer on the hot path of appending one message.
        """
        with self._lock:
            if len(statements) == 1 and (not statements[0][2] or len(statements[0][1]) == 1):
                sql, args, many = statements[0]
                self._db.execute(sql, args[0] if many else args)
                return
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for sql, args, many in statements:
                    if many:
                        self._db.executemany(sql, args)
                    else:
                        self._db.execute(sql, args)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    # -- sessions --------------------------------------------------------------------------

    def create_session(
        self, title: str = "", meta: dict[str, Any] | None = None, session_id: str | None = None,
        history: Sequence[Message] = (),
    ) -> str:  # fmt: skip
        """A new session, empty or starting with ``history`` (one transaction); returns its id."""
        sid, now = session_id or new_session_id(), time.time()
        statements: list[tuple[str, Any, bool]] = [
            ("INSERT INTO sessions (id, created_at, title, meta) VALUES (?, ?, ?, ?)",
             (sid, now, title, json.dumps(meta or {})), False),
        ]  # fmt: skip
        if history:
            sql = "INSERT INTO messages (session_id, seq, created_at, record, request) VALUES (?, ?, ?, ?, NULL)"
            statements.append((sql, [(sid, i, now, m.serialized()) for i, m in enumerate(history)], True))
        self._write(statements)
        return sid

    def set_title(self, session_id: str, title: str) -> bool:
        """Rename a session; False when there is no such session."""
        if not self.has_session(session_id):
            return False
        self._write([("UPDATE sessions SET title = ? WHERE id = ?", (title, session_id), False)])
        return True

    def has_session(self, session_id: str) -> bool:
        """Whether ``session_id`` exists."""
        return bool(self._read("SELECT 1 FROM sessions WHERE id = ?", (session_id,)))

    def session_meta(self, session_id: str) -> dict[str, Any]:
        """The meta dict a session was created with ({} for an unknown id)."""
        rows = self._read("SELECT meta FROM sessions WHERE id = ?", (session_id,))
        return dict(json.loads(rows[0][0])) if rows else {}

    _INFO = "SELECT s.id, s.created_at, s.title, (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) "

    def list_sessions(self, limit: int = 50) -> list[SessionInfo]:
        """Newest first."""
        rows = self._read(self._INFO + "FROM sessions s ORDER BY s.created_at DESC LIMIT ?", (limit,))
        return [SessionInfo(r[0], r[1], r[2], r[3]) for r in rows]

    def session_info(self, session_id: str) -> SessionInfo | None:
        """One session's row, or None when there is no such session."""
        rows = self._read(self._INFO + "FROM sessions s WHERE s.id = ?", (session_id,))
        return SessionInfo(rows[0][0], rows[0][1], rows[0][2], rows[0][3]) if rows else None

    # -- messages --------------------------------------------------------------------------

    def load_messages(self, session_id: str) -> list[Message]:
        """Every message of a session, in order.

        Raises:
            SessionNotFoundError: no such session.
            StoreError: a stored record cannot be read (the session is not resumed half-way).
        """
        if not self.has_session(session_id):
            raise SessionNotFoundError(session_id)
        rows = self._read("SELECT seq, record FROM messages WHERE session_id = ? ORDER BY seq", (session_id,))
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
        """Insert messages at ``first_seq``, ``first_seq + 1``… and mark inbox events consumed.

        One transaction for both; an existing seq is an error (append-only). ``created`` gives the
        first messages their own times (when an event was posted, not when it was taken up); the
        rest are stamped now.
        """
        now = time.time()
        trace = json.dumps(request[1]) if request is not None else None
        rows: list[tuple[str, int, float, str, str | None]] = [
            (session_id, first_seq + i, created[i] if i < len(created) else now, m.serialized(), None)
            for i, m in enumerate(messages)
        ]
        if rows and trace is not None:  # the request's trace rides on the reply it produced: one row
            rows[-1] = (*rows[-1][:4], trace)
        statements: list[tuple[str, Any, bool]] = []
        if rows:
            sql = "INSERT INTO messages (session_id, seq, created_at, record, request) VALUES (?, ?, ?, ?, ?)"
            statements.append((sql, rows, True))
        if consume:
            sql = "UPDATE inbox SET consumed_at = ? WHERE session_id = ? AND seq = ?"
            statements.append((sql, [(now, session_id, s) for s in consume], True))
        if request is not None and not rows:
            sql = "INSERT OR REPLACE INTO requests (session_id, idx, record) VALUES (?, ?, ?)"
            statements.append((sql, (session_id, request[0], trace), False))
        try:
            self._write(statements)
        except sqlite3.IntegrityError as e:
            if "UNIQUE" not in str(e) or not rows:
                raise
            last = first_seq + len(rows) - 1
            raise StoreConflictError(
                f"session {session_id} in {self.path} already has a message at seq {first_seq}..{last} "
                "(another writer appended first); nothing of this append was written",
                path=None if str(self.path) == ":memory:" else self.path,
            ) from e

    def load_requests(self, session_id: str) -> list[dict[str, Any]]:
        """Every request record of a session, in order (older databases kept them in their own table)."""
        old = self._read("SELECT record FROM requests WHERE session_id = ? ORDER BY idx", (session_id,))
        new = self._read(
            "SELECT request FROM messages WHERE session_id = ? AND request IS NOT NULL ORDER BY seq", (session_id,)
        )
        return [json.loads(r[0]) for r in (*old, *new)]

    def count_requests(self, session_id: str) -> int:
        """How many requests a session made."""
        sql = (
            "SELECT (SELECT COUNT(*) FROM requests WHERE session_id = ?) + "
            "(SELECT COUNT(*) FROM messages WHERE session_id = ? AND request IS NOT NULL)"
        )
        return int(self._read(sql, (session_id, session_id))[0][0])

    # -- frozen decisions ------------------------------------------------------------------

    def freeze(self, session_id: str, key: str, value: str) -> str:
        """Store ``value`` under ``key`` unless a value is already frozen; return the frozen one."""
        sql = "INSERT INTO frozen (session_id, key, value) VALUES (?, ?, ?) ON CONFLICT DO NOTHING RETURNING value"
        if self._read(sql, (session_id, key, value)):  # inserted: ours is the value (one round trip)
            return value
        frozen = self.frozen(session_id, key)
        assert frozen is not None
        return frozen

    def frozen_items(self, session_id: str, prefix: str) -> dict[str, str]:
        """Every frozen value of a session whose key starts with ``prefix`` (one query)."""
        sql = "SELECT key, value FROM frozen WHERE session_id = ? AND substr(key, 1, ?) = ?"
        return {str(k): str(v) for k, v in self._read(sql, (session_id, len(prefix), prefix))}

    def frozen(self, session_id: str, key: str) -> str | None:
        """The value frozen under ``key``, if any."""
        rows = self._read("SELECT value FROM frozen WHERE session_id = ? AND key = ?", (session_id, key))
        return None if not rows else str(rows[0][0])

    # -- inbox -----------------------------------------------------------------------------

    def post_event(self, session_id: str, kind: str, record: dict[str, Any]) -> tuple[int, float]:
        """Store an inbox event (durable when this returns); its sequence number and time."""
        now = time.time()
        # one statement is one transaction: the next seq is taken under SQLite's write lock, so
        # posts from several threads or processes never collide
        sql = (
            "INSERT INTO inbox (session_id, seq, posted_at, kind, record) SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ? "
            "FROM inbox WHERE session_id = ? RETURNING seq"
        )
        args = (session_id, now, kind, _encode(record), session_id)
        with self._lock:
            self._last_seq.pop(session_id, None)  # taken here without the cache: it is stale now
            rows = self._db.execute(sql, args).fetchall()
        return int(rows[0][0]), now

    def posted_record(self, key: str) -> dict[str, Any] | None:
        """The record of the inbox event posted under ``key`` (None: no such key)."""
        with self._lock:
            row = self._db.execute("SELECT record FROM inbox WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def post_events(
        self, items: Sequence[tuple[str, str, dict[str, Any], str | None]]
    ) -> list[tuple[int, float] | None]:
        """Store several ``(session_id, kind, record, key)`` inbox events in one transaction (group commit).

        Durable together when this returns; one result per item: its ``(seq, time)``,
        or None when its ``key`` was posted before (to any session: a webhook retried after a lost
        reply). Many concurrent senders share one commit this way.
        """
        now = time.time()
        insert = "INSERT INTO inbox (session_id, seq, posted_at, kind, record, key) VALUES (?, ?, ?, ?, ?, ?)"
        out: list[tuple[int, float] | None] = []
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")  # the write lock: the seqs taken below stay ours
            try:
                last = self._last_seqs(dict.fromkeys(item[0] for item in items))
                rows = []
                for sid, kind, record, key in items:
                    seq = last[sid] + 1
                    args = (sid, seq, now, kind, _encode(record), key)
                    if key is not None:
                        if not self._db.execute(insert + " ON CONFLICT DO NOTHING", args).rowcount:
                            out.append(None)
                            continue
                    else:
                        rows.append(args)
                    last[sid] = seq
                    out.append((seq, now))
                self._db.executemany(insert, rows)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            if len(self._last_seq) > _LAST_SEQ_LIMIT:
                self._last_seq.clear()
            self._last_seq.update(last)  # committed: these are the newest seqs now
        return out

    def _last_seqs(self, sessions: Iterable[str]) -> dict[str, int]:
        """The newest inbox seq of each session (0 for none); call in a write transaction, under the lock."""
        version = int(self._db.execute("PRAGMA data_version").fetchone()[0])
        if version != self._last_seq_version:  # another connection (a process, a second store) committed
            self._last_seq.clear()
            self._last_seq_version = version
        last: dict[str, int] = {}
        for sid in sessions:
            known = self._last_seq.get(sid)
            if known is None:
                row = self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM inbox WHERE session_id = ?", (sid,))
                known = int(row.fetchone()[0])
            last[sid] = known
        return last

    def pending_events(self, session_id: str) -> list[StoredEvent]:
        """Inbox events not consumed yet, oldest first (unreadable rows are skipped, not fatal)."""
        rows = self._read(
            "SELECT seq, kind, record, posted_at FROM inbox WHERE session_id = ? AND consumed_at IS NULL ORDER BY seq",
            (session_id,),
        )
        return events_from_rows(rows)

    def sessions_with_pending(self) -> list[str]:
        """Ids of sessions with inbox events not consumed yet (interrupts do not count: opening drops them)."""
        sql = "SELECT DISTINCT session_id FROM inbox WHERE consumed_at IS NULL AND kind != 'interrupt'"
        return [str(r[0]) for r in self._read(sql, ())]

    def consume(self, session_id: str, seqs: Sequence[int]) -> None:
        """Mark inbox events consumed without appending anything (interrupts, bad records)."""
        if seqs:
            sql = "UPDATE inbox SET consumed_at = ? WHERE session_id = ? AND seq = ?"
            now = time.time()
            self._write([(sql, [(now, session_id, s) for s in seqs], True)])
