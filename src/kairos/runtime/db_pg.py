"""The runtime's records on PostgreSQL: :class:`PgRuntimeDB`, the ``RecordDB`` a deployment shares.

With ``[storage] store = "postgresql://…"`` every process of the deployment (``kairos serve``, each
``kairos worker``) keeps the runtime's tables in that database, beside the sessions: named sessions
and the idempotency records of side effects (a task's ``effect_key``, ``mail_sent``) are then
deployment-wide, so an event redelivered to another worker does not repeat its side effect.

The components' SQL is written once for both backends (see :mod:`kairos.runtime.db`);
:func:`~kairos.storage.pg_sql.pg_sql` turns a statement's ``?`` placeholders into psycopg's ``%s``
(and a literal ``%`` into ``%%``), :func:`~kairos.storage.pg_sql.pg_ddl` a migration's SQLite
column types into PostgreSQL's. Migrations are versioned per owner in ``schema_versions`` as on
SQLite (:meth:`PgDatabase.migrate`: under an advisory lock, a newer schema refused). Each statement
runs on a pooled connection in autocommit mode, so it is committed before the call returns;
:meth:`PgRuntimeDB.write_many` is one transaction.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from kairos.storage import Migration
from kairos.storage.pg_sql import pg_ddl, pg_sql
from kairos.storage.postgres import PgDatabase

WHAT = "the runtime database"


class PgRuntimeDB:
    """The :class:`~kairos.runtime.db.RecordDB` on a PostgreSQL database (a small psycopg 3 pool).

    Raises:
        StoreError: psycopg is missing, the URL is malformed or the server cannot be reached; the
            message names the URL with its password masked and says what to do.
    """

    def __init__(self, url: str, *, max_size: int = 4) -> None:
        self._pg = PgDatabase(url, WHAT, max_size=max_size)
        self.url, self.shown = url, self._pg.shown
        self._lock = threading.Lock()
        self._ready: set[str] = set()

    def ensure(self, owner: str, migrations: Sequence[Migration]) -> None:
        """Bring ``owner``'s tables to version ``len(migrations)`` (once per process; :func:`pg_ddl` applied).

        Raises:
            SchemaTooNewError: a newer kairos migrated them; nothing was written.
            TypeError: a migration is Python code for SQLite (runtime migrations must be SQL).
        """
        with self._lock:
            if owner in self._ready:
                return
            scripts = []
            for n, step in enumerate(migrations, 1):
                if not isinstance(step, str):
                    raise TypeError(f"migration {n} of {owner!r} is Python for SQLite; runtime migrations must be SQL")
                scripts.append(pg_ddl(step))
            self._pg.migrate(owner, scripts)
            self._ready.add(owner)

    def read(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        """Rows of one query (also for ``… RETURNING`` writes, committed)."""
        with self._pg.connection() as conn:
            cur = conn.execute(pg_sql(sql), tuple(args))
            return cur.fetchall() if cur.description is not None else []

    def write(self, sql: str, args: Sequence[Any] = ()) -> int:
        """One statement, committed before the call returns; the number of rows changed."""
        with self._pg.connection() as conn:
            return conn.execute(pg_sql(sql), tuple(args)).rowcount

    def write_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """One statement over many rows, in one transaction (all or none)."""
        if not rows:
            return
        with self._pg.transaction() as conn, conn.cursor() as cur:
            cur.executemany(pg_sql(sql), [tuple(r) for r in rows])

    def close(self) -> None:
        """Close the pool (idempotent)."""
        self._pg.close()


__all__ = ["WHAT", "PgRuntimeDB", "pg_ddl", "pg_sql"]
