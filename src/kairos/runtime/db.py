"""The runtime's own SQLite file (``runtime.db`` beside the sessions' ``kairos.db``), WAL mode.

It holds what belongs to the runtime rather than to one trajectory: the published event stream
(resume cursors), the outbox, async tasks, timers. Each component creates its tables through
:meth:`RuntimeDB.ensure`; every write is committed before the call returns.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kairos._sqlite import connect
from kairos.errors import StoreError
from kairos.paths import ensure_state_dir


class RuntimeDB:
    """One connection shared by the runtime's components (thread-safe; short statements only)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            ensure_state_dir(self.path.parent)
        self._lock = threading.Lock()
        # every error about the file, now or in any later statement, names it (kairos._sqlite)
        self._db = connect(self.path, "the runtime database", check_same_thread=False, isolation_level=None)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=5000")
        except StoreError:
            self._db.close()
            raise

    def ensure(self, schema: str) -> None:
        """Create tables and indexes (``CREATE … IF NOT EXISTS`` statements)."""
        with self._lock:
            self._db.executescript(schema)

    def read(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        """Rows of one query (also for ``… RETURNING`` writes)."""
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def write(self, sql: str, args: Sequence[Any] = ()) -> int:
        """One statement, committed; returns the number of rows changed."""
        with self._lock:
            return self._db.execute(sql, args).rowcount

    def write_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """One statement over many rows, in one transaction."""
        if not rows:
            return
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(sql, rows)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self._db.close()
