"""Every database kairos opens gets the same PRAGMAs, and its faults read as the StoreError tree."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from kairos.context.store_sqlite import SqliteTrajectoryStore
from kairos.errors import (
    SchemaTooNewError,
    StoreBusyError,
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreReadOnlyError,
)
from kairos.knowledge import HashEmbedder, SQLiteKnowledgeStore
from kairos.knowledge import StoreError as KnowledgeStoreError
from kairos.knowledge.contextual import ContextCache
from kairos.memory import MemoryStoreError
from kairos.memory.store import SQLiteMemoryStore
from kairos.runtime.db import RuntimeDB
from kairos.storage import BUSY_TIMEOUT_S, connect, unusable

SRC = Path(__file__).parents[2] / "src" / "kairos"
EXPECTED = {"journal_mode": "wal", "synchronous": 1, "busy_timeout": int(BUSY_TIMEOUT_S * 1000),
            "foreign_keys": 1, "secure_delete": 1}  # fmt: skip


def _pragmas(db: sqlite3.Connection) -> dict[str, object]:
    return {name: db.execute(f"PRAGMA {name}").fetchone()[0] for name in EXPECTED}


@pytest.fixture
def every_database(tmp_path: Path) -> Iterator[dict[str, sqlite3.Connection]]:
    """One of each store kairos keeps, on files in ``tmp_path``: their connections by name."""
    emb = HashEmbedder()
    with ExitStack() as stack:
        sessions = SqliteTrajectoryStore(tmp_path / "kairos.db")
        stack.callback(sessions.close)
        runtime = RuntimeDB(tmp_path / "runtime.db")
        stack.callback(runtime.close)
        knowledge = SQLiteKnowledgeStore(tmp_path, emb.dim, emb.name)
        stack.callback(knowledge.close)
        memory = SQLiteMemoryStore(tmp_path, emb.dim)
        stack.callback(memory.close)
        cache = ContextCache(tmp_path / "knowledge-cache.db")
        stack.callback(cache.close)
        yield {"sessions": sessions._db, "runtime": runtime._db, "knowledge": knowledge._db,
               "memory": memory._db, "contexts": cache._db}  # fmt: skip


def test_every_store_has_the_same_pragmas(every_database: dict[str, sqlite3.Connection]) -> None:
    found = {name: _pragmas(db) for name, db in every_database.items()}
    assert found == dict.fromkeys(every_database, EXPECTED)


def test_in_memory_databases_work_with_the_same_pragmas() -> None:
    for db in (
        connect(":memory:", "a test database"),
        RuntimeDB(":memory:")._db,
        SqliteTrajectoryStore(":memory:")._db,
    ):
        assert _pragmas(db) == {**EXPECTED, "journal_mode": "memory"}
        db.close()


def test_nothing_else_in_kairos_opens_sqlite_itself() -> None:
    """A second ``sqlite3.connect`` would bring back a file with its own PRAGMAs."""
    found = [
        f"{path.relative_to(SRC)}:{n}"
        for path in SRC.rglob("*.py")
        if "storage" not in path.relative_to(SRC).parts
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"sqlite3\.connect\(", line)
    ]
    assert found == []


def _error(name: str, message: str) -> sqlite3.OperationalError:
    error = sqlite3.OperationalError(message)
    error.sqlite_errorname = name  # set by sqlite3 on real errors
    return error


@pytest.mark.parametrize(
    ("code", "kind", "advice"),
    [
        ("SQLITE_BUSY", StoreBusyError, "another process keeps it locked"),
        ("SQLITE_LOCKED_SHAREDCACHE", StoreBusyError, "another process keeps it locked"),
        ("SQLITE_READONLY_DIRECTORY", StoreReadOnlyError, "check the permissions"),
        ("SQLITE_PERM", StoreReadOnlyError, "check the permissions"),
        ("SQLITE_FULL", StoreFullError, "the disk is full"),
        ("SQLITE_CORRUPT", StoreCorruptError, "damaged or not a kairos database"),
        ("SQLITE_NOTADB", StoreCorruptError, "damaged or not a kairos database"),
        ("SQLITE_CANTOPEN", StoreError, "a folder or a broken link"),
    ],
)
def test_each_fault_raises_its_subclass_naming_the_file(tmp_path: Path, code: str, kind: type, advice: str) -> None:
    path = tmp_path / "x.db"
    error = unusable(path, "the test database", _error(code, "boom"))
    assert type(error) is kind and error.path == path
    assert str(error).startswith(f"the test database {path} cannot be used (boom): ") and advice in str(error)


def test_a_file_that_is_not_a_database_is_a_corrupt_store(tmp_path: Path) -> None:
    path = tmp_path / "kairos.db"
    path.write_bytes(b"this is not a database" * 200)
    with pytest.raises(StoreCorruptError, match="the session database") as info:
        SqliteTrajectoryStore(path)
    assert info.value.path == path and "mv " in str(info.value)


def test_a_held_write_lock_is_a_busy_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kairos.storage.sqlite.BUSY_TIMEOUT_S", 0.05)
    monkeypatch.setattr("kairos.storage.sqlite.PRAGMAS", ("PRAGMA journal_mode=WAL", "PRAGMA busy_timeout=50"))
    holder = connect(tmp_path / "x.db", "the test database")
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    other = connect(tmp_path / "x.db", "the test database")
    with pytest.raises(StoreBusyError, match="wait for that process"):
        other.execute("INSERT INTO t VALUES (1)")
    holder.execute("ROLLBACK")
    other.close()
    holder.close()


def test_the_stores_own_errors_are_in_the_tree() -> None:
    assert KnowledgeStoreError is StoreError
    assert issubclass(MemoryStoreError, StoreError) and issubclass(SchemaTooNewError, StoreError)
