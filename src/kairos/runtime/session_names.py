"""Sessions the runtime keeps by name: the default session, and one per name in a namespace (an API user).

Remembered in the runtime's records (``runtime.db``, or PostgreSQL: then deployment-wide); a
remembered session that was deleted is made again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kairos.runtime.db import RecordDB
from kairos.storage import Migration

_NAMED_SESSIONS = """
CREATE TABLE IF NOT EXISTS named_sessions (
    namespace TEXT NOT NULL, name TEXT NOT NULL, session TEXT NOT NULL, PRIMARY KEY (namespace, name)
);
CREATE TABLE IF NOT EXISTS server_openai_users ("user" TEXT PRIMARY KEY, session TEXT NOT NULL);
INSERT INTO named_sessions SELECT 'openai', "user", session FROM server_openai_users WHERE true ON CONFLICT DO NOTHING;
"""
"""Sessions kept per name (``server_openai_users``: where the OpenAI endpoint kept them before)."""
MIGRATIONS: tuple[Migration, ...] = (
    _NAMED_SESSIONS,
    "DROP TABLE server_openai_users",  # 2: the OpenAI endpoint's old table, copied by version 1, goes
)
"""The ``named_sessions`` owner's versions in the runtime's records (kairos.storage)."""


class SessionNames:
    """The default session and named sessions, made on first use and remembered.

    Args:
        db: the runtime's records (``kv`` holds the default session; ``named_sessions`` the others).
        exists: whether a session still exists.
        create_default: makes the default session.
        default: the default session, when the caller names one.
    """

    def __init__(
        self, db: RecordDB, exists: Callable[[str], bool], create_default: Callable[[], str], default: str | None = None
    ) -> None:
        self.db, self.exists, self.create_default = db, exists, create_default
        self._default = default
        self._named_ready = False  # named_sessions made (and the old openai table carried over) once

    def default(self) -> str:
        """The session events without one go to (created once, then remembered)."""
        if self._default:
            return self._default
        read = "SELECT value FROM kv WHERE key = 'default_session'"
        write = "INSERT INTO kv (key, value) VALUES ('default_session', ?) ON CONFLICT (key) DO NOTHING"
        replace = "UPDATE kv SET value = ? WHERE key = 'default_session' AND value = ?"
        self._default = self._remembered(read, (), write, replace, (), self.create_default)
        return self._default

    def named(self, namespace: str, name: str, create: Callable[[], str]) -> str:
        """The session kept for ``name`` in ``namespace``, made with ``create`` on first use."""
        if not self._named_ready:
            self.db.ensure("named_sessions", MIGRATIONS)
            self._named_ready = True
        return self._remembered(
            "SELECT session FROM named_sessions WHERE namespace = ? AND name = ?", (namespace, name),
            "INSERT INTO named_sessions (namespace, name, session) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            "UPDATE named_sessions SET session = ? WHERE namespace = ? AND name = ? AND session = ?",
            (namespace, name), create,
        )  # fmt: skip

    def _remembered(
        self, read: str, key: tuple[Any, ...], insert: str, replace: str, where: tuple[Any, ...],
        create: Callable[[], str],
    ) -> str:  # fmt: skip
        """The session a row remembers, made and remembered when missing or deleted.

        Two processes sharing the records (workers on PostgreSQL) may both find none: each makes one,
        the first insert (or compare-and-set over a deleted one) wins, and both return the winner's.
        """
        rows = self.db.read(read, key)
        old = str(rows[0][0]) if rows else ""
        if old and self.exists(old):
            return old
        sid = create()
        if rows:
            self.db.write(replace, (sid, *where, old))
        else:
            self.db.write(insert, (*where, sid) if where else (sid,))
        rows = self.db.read(read, key)
        return str(rows[0][0]) if rows else sid
