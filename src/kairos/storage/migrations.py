"""Versioned schema migrations, per owner of tables in a shared database file.

Several components keep tables in one file (``runtime.db`` holds the bus's, the timers', the
outbox's…; ``knowledge.db`` the knowledge base's, the graph's and the memories'), so the version is
kept per owner, in ``schema_versions (owner, version)``, not in the file's single ``user_version``.

An owner declares an ordered list of migrations; version *n* is the state after the *n*-th. Version
1 is the ``CREATE … IF NOT EXISTS`` schema of the release before versions existed, so a database it
wrote adopts version 1 unchanged. Each migration runs in its own ``BEGIN IMMEDIATE`` transaction
with the version bump: a failing one rolls back whole and leaves the version where it was, and two
processes opening the same file at once apply it once (the second sees the new version inside its
transaction). A version newer than the list raises :class:`~kairos.errors.SchemaTooNewError` before
anything is written.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import TypeAlias

from kairos.errors import SchemaTooNewError
from kairos.storage.sqlite import Connection

Migration: TypeAlias = str | Callable[[sqlite3.Connection], object]
"""SQL statements (run one by one, ``;``-separated) or a function of the connection: one version step."""

_TABLE = "CREATE TABLE IF NOT EXISTS schema_versions (owner TEXT PRIMARY KEY, version INTEGER NOT NULL)"


def statements(script: str) -> Iterator[str]:
    """The complete statements of ``script`` (``executescript`` would commit the open transaction first)."""
    buffer = ""
    for piece in script.split(";"):
        buffer += piece + ";"
        if sqlite3.complete_statement(buffer):
            if buffer.strip(" \t\r\n;"):
                yield buffer
            buffer = ""
    if buffer.strip(" \t\r\n;"):
        yield buffer


def schema_version(db: sqlite3.Connection, owner: str) -> int:
    """The version of ``owner``'s tables in ``db`` (0: none recorded)."""
    exists = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_versions'").fetchone()
    if exists is None:
        return 0
    row = db.execute("SELECT version FROM schema_versions WHERE owner = ?", (owner,)).fetchone()
    return 0 if row is None else int(row[0])


def _refuse_newer(db: Connection, owner: str, found: int, known: int) -> None:
    if found <= known:
        return
    path, what = db.named.path, db.named.what
    raise SchemaTooNewError(
        f"{what} {path} was written by a newer kairos ({owner} tables at version {found}, this release knows "
        f"up to {known}) and was left as it is: upgrade kairos, or move it away (mv {path} {path}.broken) "
        "to start afresh",
        path=path, owner=owner, found=found, known=known,
    )  # fmt: skip


def migrate(db: Connection, owner: str, migrations: Sequence[Migration]) -> int:
    """Bring ``owner``'s tables in ``db`` to version ``len(migrations)``; returns the version found.

    ``db`` must be in autocommit mode (as :func:`~kairos.storage.sqlite.connect` opens it) and not
    used by another thread meanwhile (callers hold their store's lock).

    Raises:
        SchemaTooNewError: a newer release migrated ``owner``'s tables; nothing was written.
        StoreError: the file cannot be read or written (a failing migration is rolled back).
    """
    known = len(migrations)
    found = schema_version(db, owner)
    _refuse_newer(db, owner, found, known)
    if found == known:
        return found
    db.execute(_TABLE)
    for target in range(found + 1, known + 1):
        db.execute("BEGIN IMMEDIATE")
        try:
            current = schema_version(db, owner)  # another process may have migrated since the read above
            _refuse_newer(db, owner, current, known)
            if current < target:
                step = migrations[target - 1]
                if isinstance(step, str):
                    for statement in statements(step):
                        db.execute(statement)
                else:
                    step(db)
                db.execute(
                    "INSERT INTO schema_versions (owner, version) VALUES (?, ?) "
                    "ON CONFLICT (owner) DO UPDATE SET version = excluded.version",
                    (owner, target),
                )
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
    return found
