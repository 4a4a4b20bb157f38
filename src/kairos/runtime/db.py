"""The runtime's own records: :class:`RecordDB`, on SQLite (``runtime.db``) or PostgreSQL.

They belong to the runtime rather than to one trajectory: the published event stream (resume
cursors, embedded bus only), the outbox, async tasks, timers, watches, mail state, named sessions
and the idempotency records of side effects. Each component brings its tables to its version
through :meth:`RecordDB.ensure` (:mod:`kairos.storage.migrations`, one owner per component); every
write is committed before the call returns.

Components write ONE SQL text for both backends, in the subset SQLite (≥ 3.24) and PostgreSQL
share: ``?`` placeholders, ``INSERT … ON CONFLICT … DO UPDATE SET c = excluded.c`` / ``DO NOTHING``
(never ``INSERT OR REPLACE``/``OR IGNORE``), ``RETURNING``, no ``rowid``, ``GLOB`` or SQLite-only
functions, reserved words quoted (``"user"``, ``"end"``), and each column given one type.
:class:`~kairos.runtime.db_pg.PgRuntimeDB` translates placeholders and the DDL of migrations.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from kairos.paths import ensure_state_dir
from kairos.storage import Migration, connect, migrate
from kairos.storage.config import store_kind


@runtime_checkable
class RecordDB(Protocol):
    """Where the runtime's components keep their tables (see the module docstring for the SQL rules)."""

    def ensure(self, owner: str, migrations: Sequence[Migration]) -> None:
        """Bring ``owner``'s tables to version ``len(migrations)`` (once per connection).

        Raises:
            SchemaTooNewError: a newer kairos migrated them; nothing was written.
        """
        ...

    def read(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        """Rows of one query (also for ``… RETURNING`` writes, committed)."""
        ...

    def write(self, sql: str, args: Sequence[Any] = ()) -> int:
        """One statement, committed before the call returns; the number of rows changed."""
        ...

    def write_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """One statement over many rows, in one transaction (all or none)."""
        ...

    def close(self) -> None:
        """Release the connection(s) (idempotent)."""
        ...


class RuntimeDB:
    """The :class:`RecordDB` in an SQLite file: one connection shared by the components (thread-safe)."""

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


def open_records(store: str, state_dir: Path) -> RecordDB:
    """The runtime's records for a ``[storage] store`` value: ``runtime.db`` in ``state_dir``, or PostgreSQL.

    Raises:
        ValueError: ``store`` names no store.
        StoreError: the database cannot be used (the message names it, a URL with its password masked).
    """
    if store_kind(store) == "postgresql":
        from kairos.runtime.db_pg import PgRuntimeDB

        return PgRuntimeDB(store)
    return RuntimeDB(state_dir / "runtime.db")
