"""Every kairos SQLite database is opened here: one PRAGMA set, errors that name the file.

The PRAGMAs (see :data:`PRAGMAS`), the same for ``kairos.db``, ``runtime.db``, ``knowledge.db`` and
``knowledge-cache.db``, so no file is safer or slower than another by accident:

- ``journal_mode=WAL``: readers never wait for the writer; with ``synchronous=NORMAL`` a crash of
  kairos loses no commit, a power cut only the last ones, never consistency (``:memory:`` stays
  ``memory``).
- ``busy_timeout``: :data:`BUSY_TIMEOUT_S`; a knowledge-base ingest holds the write lock for
  seconds, and a writer that waits is better than one that fails.
- ``foreign_keys=ON``: the ``REFERENCES`` in the schemas are enforced (graph rows go with their chunks).
- ``secure_delete=ON``: deleted rows (a forgotten memory, a session's text) are overwritten, not left
  in free pages; the cost is paid on deletes only.

sqlite3 says "database disk image is malformed", "file is not a database" or "unable to open
database file" without saying which file, and damage often shows only when a query reaches a
broken page, long after the file opened (a ``kb search`` on a half-overwritten ``knowledge.db``
printed a traceback). A connection from :func:`connect` turns such an error, from any statement,
fetch or commit, into a :class:`~kairos.errors.StoreError` (the subclass for the fault) naming the
file, so every command prints one line instead. The file is left as it is: it may be restorable,
and it is the user's.

Constraint violations (``IntegrityError``) and misuse (``ProgrammingError``) are not about the
file and pass through unchanged.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

from kairos.errors import (
    StoreBusyError,
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreReadOnlyError,
)

BUSY_TIMEOUT_S = 30.0
"""How long a statement waits for another connection's write lock before :class:`StoreBusyError`."""
PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}",
    "PRAGMA foreign_keys=ON",
    "PRAGMA secure_delete=ON",
)
"""Run on every connection :func:`connect` opens (see the module docstring for why each)."""


def unusable(path: Path, what: str, error: sqlite3.Error) -> StoreError:
    """The error for ``error`` on ``what`` (e.g. "the knowledge database") at ``path``: what happened, what to do."""
    code = getattr(error, "sqlite_errorname", "") or ""
    away = f"move it away (mv {path} {path}.broken) to start afresh"
    kind: type[StoreError]
    if code.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        kind = StoreBusyError
        advice = "another process keeps it locked: wait for that process to finish (or stop it) and try again"
    elif code.startswith(("SQLITE_READONLY", "SQLITE_PERM", "SQLITE_AUTH")):
        kind = StoreReadOnlyError
        advice = f"it cannot be written: check the permissions of {path} and of its folder"
    elif code.startswith("SQLITE_FULL"):
        kind = StoreFullError
        advice = "the disk is full: free some space and try again"
    elif code.startswith("SQLITE_CANTOPEN") or path.is_dir():
        kind = StoreError
        advice = f"a folder or a broken link is in its place, or it is not readable: check it, or {away}"
    else:  # SQLITE_CORRUPT, SQLITE_NOTADB, SQLITE_IOERR, or tables of another program
        kind = StoreCorruptError
        advice = f"it is damaged or not a kairos database, and was left as it is: {away}, or restore it from a backup"
    return kind(f"{what} {path} cannot be used ({error}): {advice}", path=path)


class _Named:
    """A context that turns a database error about the file into :func:`unusable` (cheaper than ``@contextmanager``)."""

    __slots__ = ("path", "what")

    def __init__(self, path: Path, what: str) -> None:
        self.path, self.what = path, what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if isinstance(error, sqlite3.DatabaseError) and not isinstance(
            error, (sqlite3.IntegrityError, sqlite3.ProgrammingError)
        ):
            raise unusable(self.path, self.what, error) from error


class _Cursor(sqlite3.Cursor):
    """A cursor whose statements and fetches name the file in their errors."""

    def __init__(self, connection: Connection) -> None:
        super().__init__(connection)
        self._named = connection.named

    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:
        with self._named:
            return super().execute(sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Iterable[Any], /) -> _Cursor:
        with self._named:
            return super().executemany(sql, seq_of_parameters)

    def executescript(self, sql_script: str, /) -> sqlite3.Cursor:
        with self._named:
            return super().executescript(sql_script)

    def fetchone(self) -> Any:
        with self._named:
            return super().fetchone()

    def fetchmany(self, size: int | None = None) -> list[Any]:
        with self._named:
            return super().fetchmany(self.arraysize if size is None else size)

    def fetchall(self) -> list[Any]:
        with self._named:
            return super().fetchall()

    def __next__(self) -> Any:
        with self._named:
            return super().__next__()


class Connection(sqlite3.Connection):
    """A connection whose cursors (``execute`` and friends use them too) and commits name the file in their errors."""

    named: _Named

    def cursor(self, factory: Any = None) -> Any:
        """A cursor that names this file in its errors."""
        return _Cursor(self) if factory is None else super().cursor(factory)

    # sqlite3's own shortcuts run the statement in C, past the cursor's methods: route them through them
    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        """``cursor().execute(...)``."""
        return _Cursor(self).execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> sqlite3.Cursor:
        """``cursor().executemany(...)``."""
        return _Cursor(self).executemany(sql, parameters)

    def executescript(self, sql_script: str, /) -> sqlite3.Cursor:
        """``cursor().executescript(...)``."""
        return _Cursor(self).executescript(sql_script)

    def commit(self) -> None:
        """Commit; an error about the file names it."""
        with self.named:
            super().commit()


def connect(path: Path | str, what: str) -> Connection:
    """Open a kairos database with :data:`PRAGMAS`, in autocommit mode, shareable between threads.

    Callers serialise their own statements (one lock per store) and open transactions with
    ``BEGIN IMMEDIATE``; ``":memory:"`` opens a private in-memory database.

    Args:
        path: the database file (its folder must exist).
        what: what it is, for messages: "the knowledge database".

    Raises:
        StoreError: the file cannot be opened or its PRAGMAs cannot be set (the subclass says why).
    """
    file = Path(path)
    try:
        db = sqlite3.connect(
            str(path), factory=Connection, timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None
        )
    except sqlite3.DatabaseError as e:
        raise unusable(file, what, e) from e
    db.named = _Named(file, what)
    try:
        for pragma in PRAGMAS:
            _patiently(db, pragma)
    except StoreError:
        db.close()
        raise
    return db


def _patiently(db: Connection, sql: str) -> None:
    """``db.execute(sql)``, retried while the file is busy, up to :data:`BUSY_TIMEOUT_S`.

    Switching a new file to WAL takes an exclusive lock, and SQLite answers "database is locked" at
    once, past the busy handler, when several processes open the same new file together (workers
    starting side by side did).
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.005
    while True:
        try:
            db.execute(sql)
            return
        except StoreBusyError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
