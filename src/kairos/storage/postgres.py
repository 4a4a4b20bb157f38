"""PostgreSQL for kairos's stores: one way to connect (a psycopg 3 pool), versioned migrations, clear errors.

psycopg is the ``scale`` extra, imported only when a ``postgresql://`` URL is used; without it the
error says ``pip install 'kairos-harness[scale]'``. Every error names the server by its URL with the
password masked (:func:`~kairos.storage.config.mask_url`) and says what to do; connection failures are
:class:`~kairos.errors.StoreError`, a full disk :class:`~kairos.errors.StoreFullError`, a read-only
server :class:`~kairos.errors.StoreReadOnlyError`.

Migrations mirror :mod:`kairos.storage.migrations`: ``schema_versions (owner, version)``, one
transaction per step with its version bump, under an advisory lock so that processes starting
together apply each step once, and a version newer than this release is refused before anything
is written (:class:`~kairos.errors.SchemaTooNewError`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from kairos.errors import SchemaTooNewError, StoreError, StoreFullError, StoreReadOnlyError
from kairos.storage.config import mask_url

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

INSTALL_HINT = "pip install 'kairos-harness[scale]'"
CONNECT_TIMEOUT_S = 10
"""How long opening a connection may take before the server counts as unreachable."""
_MIGRATE_LOCK = 0x6B616972  # "kair": one advisory lock serialises every owner's migrations
_VERSIONS = "CREATE TABLE IF NOT EXISTS schema_versions (owner TEXT PRIMARY KEY, version INTEGER NOT NULL)"


def _scrub(text: str, url: str) -> str:
    """``text`` (a driver's message that may quote the URL) without the URL's password."""
    for pattern in (r"^[a-z]+://[^:/@?#]*:([^@/?#]*)@", r"(?i)password=([^&\s]*)"):
        found = re.search(pattern, url)
        if found and found.group(1):
            text = text.replace(found.group(1), "***")
    return text


def _psycopg() -> Any:
    try:
        import psycopg
        import psycopg_pool  # noqa: F401  # checked here so the hint covers both
    except ImportError as e:
        raise StoreError(f"a postgresql:// store needs psycopg 3 and psycopg_pool ({e}): {INSTALL_HINT}") from e
    return psycopg


def fault(error: Exception, url: str, what: str) -> StoreError:
    """The :class:`StoreError` for a psycopg error about the server at ``url`` (names it, says what to do)."""
    shown = mask_url(url)
    state = getattr(error, "sqlstate", None) or ""
    reason = _scrub(str(error).strip().splitlines()[0], url) if str(error).strip() else type(error).__name__
    if state == "53100":
        return StoreFullError(
            f"{what} at {shown} cannot be written ({reason}): its disk is full; free space on the server"
        )
    if state == "25006":
        return StoreReadOnlyError(
            f"{what} at {shown} is read-only ({reason}): point kairos at the primary, not a replica"
        )
    return StoreError(
        f"{what} at {shown} cannot be used ({reason}): check that PostgreSQL is running there and that the URL's "
        "host, port, user, password and database are right (the database must exist: createdb NAME)"
    )


class PgDatabase:
    """A pool of connections to one PostgreSQL database; every fault is a :class:`StoreError` naming it.

    Raises:
        StoreError: psycopg is missing, the URL is malformed, or the server cannot be reached.
    """

    def __init__(self, url: str, what: str, *, max_size: int = 10) -> None:
        psycopg = _psycopg()
        from psycopg_pool import ConnectionPool

        self.url, self.what = url, what
        self.shown = mask_url(url)
        try:
            psycopg.conninfo.conninfo_to_dict(url)
        except psycopg.ProgrammingError as e:
            raise StoreError(
                f"{what} URL {self.shown} is not a PostgreSQL URL ({_scrub(str(e).strip(), url)}): "
                "write postgresql://USER:PASSWORD@HOST:PORT/DB"
            ) from e
        try:  # one plain connection first: its error says why (refused, bad password, no such database)
            psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S).close()
        except psycopg.Error as e:
            raise fault(e, url, what) from e
        self._pool: ConnectionPool[Any] = ConnectionPool(
            url, min_size=1, max_size=max_size, open=False, name=what,
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
        )  # fmt: skip
        try:
            self._pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
        except psycopg.Error as e:
            self._pool.close()
            raise fault(e, url, what) from e
        self._errors: type[Exception] = psycopg.OperationalError

    def close(self) -> None:
        """Close every connection (idempotent)."""
        self._pool.close()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection in autocommit mode (server faults become :class:`StoreError`)."""
        try:
            with self._pool.connection() as conn:
                yield conn
        except self._errors as e:  # OperationalError: the server, not the statement (PoolTimeout too)
            raise fault(e, self.url, self.what) from e

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection inside one transaction: committed when the block ends, rolled back on an error."""
        with self.connection() as conn, conn.transaction():
            yield conn

    def read(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one statement."""
        with self.connection() as conn:
            return conn.execute(sql, args).fetchall()

    def migrate(self, owner: str, migrations: Sequence[str]) -> int:
        """Bring ``owner``'s tables to version ``len(migrations)``; returns the version found.

        Raises:
            SchemaTooNewError: a newer release migrated ``owner``'s tables; nothing was written.
        """
        known = len(migrations)
        found = -1
        for target in range(1, known + 1):
            with self.transaction() as conn:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATE_LOCK,))
                conn.execute(_VERSIONS)
                row = conn.execute("SELECT version FROM schema_versions WHERE owner = %s", (owner,)).fetchone()
                current = 0 if row is None else int(row[0])
                found = current if found < 0 else found
                if current > known:
                    raise SchemaTooNewError(
                        f"{self.what} at {self.shown} was migrated by a newer kairos ({owner} tables at version "
                        f"{current}, this release knows up to {known}) and was left as it is: upgrade kairos",
                        path=None, owner=owner, found=current, known=known,
                    )  # fmt: skip
                if current >= target:
                    continue
                conn.execute(migrations[target - 1])
                conn.execute(
                    "INSERT INTO schema_versions (owner, version) VALUES (%s, %s) "
                    "ON CONFLICT (owner) DO UPDATE SET version = excluded.version",
                    (owner, target),
                )
        return max(found, 0)
