"""Append-only trajectory persistence in SQLite (WAL).

Rows are only ever inserted: a session's messages are the ordered ``messages`` rows, and
decisions that must survive a resume byte for byte (spill previews, compression summaries)
go to ``frozen``, written once and never updated.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kairos.errors import SessionNotFoundError
from kairos.models.types import Message

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
"""


@dataclass(frozen=True, slots=True)
class SessionInfo:
    id: str
    created_at: float
    title: str
    messages: int


class TrajectoryStore:
    """One SQLite file per workspace; safe to share between sessions of one process."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def create_session(self, title: str = "", meta: dict[str, Any] | None = None, session_id: str | None = None) -> str:
        sid = session_id or uuid.uuid4().hex[:12]
        with self._lock:
            self._db.execute(
                "INSERT INTO sessions (id, created_at, title, meta) VALUES (?, ?, ?, ?)",
                (sid, time.time(), title, json.dumps(meta or {})),
            )
        return sid

    def has_session(self, session_id: str) -> bool:
        with self._lock:
            row = self._db.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return row is not None

    def load_messages(self, session_id: str) -> list[Message]:
        if not self.has_session(session_id):
            raise SessionNotFoundError(session_id)
        with self._lock:
            rows = self._db.execute(
                "SELECT record FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
            ).fetchall()
        return [Message.from_record(json.loads(r[0])) for r in rows]

    def append_messages(self, session_id: str, first_seq: int, messages: Iterable[Message]) -> None:
        """Insert messages at ``first_seq``, ``first_seq + 1``…; an existing seq is an error (append-only)."""
        now = time.time()
        rows = [(session_id, first_seq + i, now, m.serialized()) for i, m in enumerate(messages)]
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.executemany(
                    "INSERT INTO messages (session_id, seq, created_at, record) VALUES (?, ?, ?, ?)", rows
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def append_request(self, session_id: str, idx: int, record: dict[str, Any]) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO requests (session_id, idx, record) VALUES (?, ?, ?)",
                (session_id, idx, json.dumps(record)),
            )

    def load_requests(self, session_id: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT record FROM requests WHERE session_id = ? ORDER BY idx", (session_id,)
            ).fetchall()
        return [json.loads(r[0]) for r in rows]

    def freeze(self, session_id: str, key: str, value: str) -> str:
        """Store ``value`` under ``key`` unless a value is already frozen; return the frozen one."""
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO frozen (session_id, key, value) VALUES (?, ?, ?)", (session_id, key, value)
            )
            row = self._db.execute(
                "SELECT value FROM frozen WHERE session_id = ? AND key = ?", (session_id, key)
            ).fetchone()
        return str(row[0])

    def frozen(self, session_id: str, key: str) -> str | None:
        with self._lock:
            row = self._db.execute(
                "SELECT value FROM frozen WHERE session_id = ? AND key = ?", (session_id, key)
            ).fetchone()
        return None if row is None else str(row[0])

    def list_sessions(self, limit: int = 50) -> list[SessionInfo]:
        with self._lock:
            rows = self._db.execute(
                "SELECT s.id, s.created_at, s.title, (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) "
                "FROM sessions s ORDER BY s.created_at DESC LIMIT ?",
                (limit,),
            ).fetchall()
        return [SessionInfo(r[0], r[1], r[2], r[3]) for r in rows]
