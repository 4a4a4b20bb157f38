"""The runtime's own SQLite file (``runtime.db`` beside the sessions' ``kairos.db``).

It holds what belongs to the runtime rather than to one trajectory: the published event stream
(resume cursors), the outbox, async tasks, timers. Each component brings its tables to its version
through :meth:`RuntimeDB.ensure` (:mod:`kairos.storage.migrations`, one owner per component); every
write is committed before the call returns.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kairos.paths import ensure_state_dir
from kairos.storage import Migration, connect, migrate


class RuntimeDB:
    """One connection shared by the runtime's components (thread-safe; short statements only)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            ensure_state_dir(self.path.parent)
        self._lock = threading.Lock()
        self._ready: set[str] = set()
        # every error about the file, now or in any later statement, names it (kairos.storage)
        self._db = connect(self.path, "the runtime database")

    def ensure(self, owner: str, migrations: Sequence[Migration]) -> None:
        """Bring ``owner``'s tables to version ``len(migrations)`` (once per connection; see kairos.storage).

        Raises:
            SchemaTooNewError: a newer kairos migrated them.
        """
        with self._lock:
            if owner not in self._ready:
                migrate(self._db, owner, migrations)
                self._ready.add(owner)

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
