"""One leader per deployment (issue 26 §3): timers, file watches and mail run in one process, not in each.

Components that say ``leader_only = True`` (:class:`~kairos.runtime.handle.Component`) start in a
runtime only while it holds the deployment's :class:`LeaderLease`. On PostgreSQL the lease is
:class:`PgLeaderLease`: a session-level advisory lock (``pg_try_advisory_lock``) keyed by the
deployment's name, on a connection of its own, so the server drops it when the holder's connection
ends (``kill -9`` included). A process without it tries again every ``retry_s`` and starts the
components when it takes over; a leader that loses its connection stops them and tries again.
With the embedded SQLite store there is no lease: the one process is the leader.

The tools of a leader's component work on every worker: a worker that does not run it writes its
rows in the shared records and bumps a :class:`ChangeCounter`, which the leader's component reads
every few seconds (one small query) to take those rows in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from kairos.storage.postgres import CONNECT_TIMEOUT_S

if TYPE_CHECKING:
    from kairos.runtime.db import RecordDB

log = logging.getLogger("kairos.runtime.leader")

LEADER_KEY = "SELECT hashtextextended('kairos.leader:' || %s, 0)"
"""The advisory lock's key for a deployment's name (tests look the holder up with it)."""


class LeaderLease(Protocol):
    """The deployment's leader lease: at most one holder at a time."""

    def try_acquire(self) -> bool:
        """Take the lease if it is free, or check that it is still held; True while this holder has it."""
        ...

    def release(self) -> None:
        """Give it up (idempotent)."""
        ...


class PgLeaderLease:
    """The leader lease as an advisory lock on a PostgreSQL connection of its own (see the module docstring).

    Args:
        url: the deployment's PostgreSQL URL (``[storage] store``).
        deployment: the name every process of the deployment shares (the NATS stream's name).
    """

    def __init__(self, url: str, deployment: str) -> None:
        self.url = url
        self.deployment = deployment
        self._conn: Any = None

    @property
    def held(self) -> bool:
        """Whether this holder had the lease at the last :meth:`try_acquire`."""
        return self._conn is not None

    def try_acquire(self) -> bool:
        """True when this holder has the lease (taken now, or still alive); False when another one holds it.

        A server that cannot be reached counts as not held (logged); the next try connects again.
        """
        import psycopg

        if self._conn is not None:
            try:
                self._conn.execute("SELECT 1")
                return True
            except psycopg.Error as e:  # the connection died: so did the lock
                log.warning("the leader lease's connection was lost (%s)", e)
                self.release()
                return False
        command = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv[:3])) or "python"
        try:
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                                   application_name=f"kairos leader pid {os.getpid()} ({command})"[:63])  # fmt: skip
        except psycopg.Error as e:
            log.warning("the leader lease cannot reach the database (%s)", e)
            return False
        try:
            row = conn.execute(LEADER_KEY, (self.deployment,)).fetchone()
            got = conn.execute("SELECT pg_try_advisory_lock(%s)", (row[0] if row else 0,)).fetchone()
        except psycopg.Error as e:
            conn.close()
            log.warning("taking the leader lease failed (%s)", e)
            return False
        if not (got and got[0]):
            conn.close()
            return False
        self._conn = conn
        return True

    def release(self) -> None:
        """Give the lease up: closing the connection drops the lock."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def __del__(self) -> None:
        self.release()


async def lead(
    lease: LeaderLease, start: Callable[[], list[asyncio.Task[None]]], retry_s: float, on_change: Callable[[bool], None]
) -> None:
    """Until cancelled: take ``lease`` (every ``retry_s``), ``start`` the leader's components while it is held.

    ``on_change(True)`` is called right before ``start``, ``on_change(False)`` when the lease is lost
    (the started tasks are cancelled then).
    """
    tasks: list[asyncio.Task[None]] = []
    try:
        while True:
            try:
                held = await asyncio.to_thread(lease.try_acquire)
            except Exception:  # a bug here must not take the runtime down: not held, tried again
                log.exception("the leader lease failed")
                held = False
            if held and not tasks:
                log.info("this process leads the deployment: it runs the timers, file watches and mail")
                on_change(True)
                tasks = start()
            elif not held and tasks:
                log.warning("the leader lease was lost: the timers, file watches and mail stop here")
                on_change(False)
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                tasks = []
            await asyncio.sleep(retry_s)
    finally:
        on_change(False)
        lease.release()


class ChangeCounter:
    """How a leader's component hears that another worker changed its rows: a counter they bump.

    ``<owner>_meta`` holds one row, ``version``; :meth:`migration` is the owner's migration that makes it.
    """

    def __init__(self, owner: str) -> None:
        self.table = f"{owner}_meta"
        self.seen = 0

    def migration(self) -> str:
        """The DDL of the counter's table (one of the owner's migrations)."""
        return (
            f"CREATE TABLE IF NOT EXISTS {self.table} (id INTEGER PRIMARY KEY CHECK (id = 0), "
            "version INTEGER NOT NULL);\n"
            f"INSERT INTO {self.table} (id, version) VALUES (0, 0) ON CONFLICT DO NOTHING;"
        )

    def bump(self, db: RecordDB) -> None:
        """Say that the rows changed (a worker that does not run the component)."""
        db.write(f"UPDATE {self.table} SET version = version + 1 WHERE id = 0")

    def read(self, db: RecordDB) -> int:
        """The counter now (remembered as seen)."""
        rows = db.read(f"SELECT version FROM {self.table} WHERE id = 0")
        self.seen = int(rows[0][0]) if rows else 0
        return self.seen

    def changed(self, db: RecordDB) -> bool:
        """Whether another worker bumped the counter since the last :meth:`read` or :meth:`changed`."""
        before = self.seen
        return self.read(db) != before


__all__ = ["LEADER_KEY", "ChangeCounter", "LeaderLease", "PgLeaderLease", "lead"]
