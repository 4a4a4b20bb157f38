"""Versioned migrations per owner: once, in order, all of a step or none, and never on a newer file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from kairos.errors import SchemaTooNewError, StoreError
from kairos.storage import Connection, Migration, connect, migrate, schema_version, statements


def _open(path: Path) -> Connection:
    return connect(path, "the test database")


def _log(db: sqlite3.Connection) -> list[str]:
    return [str(r[0]) for r in db.execute("SELECT step FROM log ORDER BY rowid")]


STEPS: list[Migration] = [
    "CREATE TABLE IF NOT EXISTS log (step TEXT NOT NULL); INSERT INTO log VALUES ('1');",
    "INSERT INTO log VALUES ('2')",
    lambda db: db.execute("INSERT INTO log VALUES ('3')"),
]


def test_migrations_run_once_and_in_order(tmp_path: Path) -> None:
    db = _open(tmp_path / "a.db")
    assert migrate(db, "owner", STEPS) == 0
    assert _log(db) == ["1", "2", "3"] and schema_version(db, "owner") == 3
    assert migrate(db, "owner", STEPS) == 3  # nothing left to do
    db.close()
    db = _open(tmp_path / "a.db")
    migrate(db, "owner", STEPS)
    assert _log(db) == ["1", "2", "3"]
    migrate(db, "owner", [*STEPS, "INSERT INTO log VALUES ('4')"])  # a later release adds a step
    assert _log(db) == ["1", "2", "3", "4"] and schema_version(db, "owner") == 4
    db.close()


def test_owners_sharing_a_file_keep_their_own_versions(tmp_path: Path) -> None:
    db = _open(tmp_path / "a.db")
    migrate(db, "one", ["CREATE TABLE one (x)"])
    migrate(db, "two", ["CREATE TABLE two (x)", "CREATE TABLE two_b (x)"])
    assert (schema_version(db, "one"), schema_version(db, "two"), schema_version(db, "three")) == (1, 2, 0)
    db.close()


def test_a_failing_migration_rolls_back_whole_and_leaves_the_version(tmp_path: Path) -> None:
    db = _open(tmp_path / "a.db")
    broken: list[Migration] = [
        STEPS[0],
        "CREATE TABLE half (x); INSERT INTO log VALUES ('2'); INSERT INTO nowhere VALUES (1)",
    ]
    with pytest.raises(StoreError, match="the test database"):
        migrate(db, "owner", broken)
    assert schema_version(db, "owner") == 1 and _log(db) == ["1"]
    assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'half'").fetchone()[0] == 0
    assert not db.in_transaction

    def fails(db: sqlite3.Connection) -> None:
        db.execute("INSERT INTO log VALUES ('x')")
        raise RuntimeError("a bug in a migration")

    with pytest.raises(RuntimeError, match="a bug"):
        migrate(db, "owner", [STEPS[0], fails])
    assert schema_version(db, "owner") == 1 and _log(db) == ["1"]
    migrate(db, "owner", STEPS)  # the fixed release goes on from version 1
    assert _log(db) == ["1", "2", "3"]
    db.close()


def test_a_newer_schema_is_refused_and_the_file_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    db = _open(path)
    migrate(db, "owner", [*STEPS, "INSERT INTO log VALUES ('4')"])
    db.close()
    before = path.read_bytes()
    db = _open(path)
    with pytest.raises(SchemaTooNewError, match="newer kairos") as info:
        migrate(db, "owner", STEPS)
    db.close()
    assert (info.value.owner, info.value.found, info.value.known, info.value.path) == ("owner", 4, 3, path)
    assert "upgrade kairos" in str(info.value) and str(path) in str(info.value)
    assert path.read_bytes() == before


def test_a_store_on_a_newer_file_is_refused(tmp_path: Path) -> None:
    from kairos.context.store_sqlite import SqliteTrajectoryStore

    SqliteTrajectoryStore(tmp_path / "kairos.db").close()
    raw = sqlite3.connect(tmp_path / "kairos.db")
    raw.execute("UPDATE schema_versions SET version = 99 WHERE owner = 'sessions'")
    raw.commit()
    raw.close()
    with pytest.raises(SchemaTooNewError, match="the session database"):
        SqliteTrajectoryStore(tmp_path / "kairos.db")


def test_statements_split_at_complete_statements_only() -> None:
    script = """
    CREATE TABLE t (x TEXT);
    INSERT INTO t VALUES ('a; b');
    CREATE TRIGGER t_ins AFTER INSERT ON t BEGIN INSERT INTO t VALUES ('c'); END;
    -- a comment;
    """
    got = [s.strip() for s in statements(script)]
    assert got[:3] == [
        "CREATE TABLE t (x TEXT);",
        "INSERT INTO t VALUES ('a; b');",
        "CREATE TRIGGER t_ins AFTER INSERT ON t BEGIN INSERT INTO t VALUES ('c'); END;",
    ]
    db = sqlite3.connect(":memory:")
    for s in statements(script):
        db.execute(s)
    db.execute("INSERT INTO t VALUES ('d')")  # the trigger is whole: it adds its row
    assert [r[0] for r in db.execute("SELECT x FROM t ORDER BY rowid")] == ["a; b", "d", "c"]
    db.close()


def test_two_connections_migrating_at_once_apply_each_step_once(tmp_path: Path) -> None:
    """The second waits for the first's write lock, then finds the version moved on and skips the step."""
    import threading

    inside, release = threading.Event(), threading.Event()

    def slow(db: sqlite3.Connection) -> None:
        db.execute("INSERT INTO log VALUES ('slow')")
        if not inside.is_set():  # only the first to get here waits: the other would be a second run
            inside.set()
            assert release.wait(10)

    steps: list[Migration] = [STEPS[0], slow]
    first, second = _open(tmp_path / "a.db"), _open(tmp_path / "a.db")
    migrate(first, "owner", steps[:1])
    worker = threading.Thread(target=migrate, args=(first, "owner", steps))
    worker.start()
    assert inside.wait(10)
    begun = threading.Event()
    second.set_trace_callback(lambda sql: begun.set() if sql.startswith("BEGIN IMMEDIATE") else None)
    waiting = threading.Thread(target=migrate, args=(second, "owner", steps))
    waiting.start()
    assert begun.wait(10)  # it read version 1 and waits for the first's write lock
    release.set()
    worker.join(10)
    waiting.join(10)
    assert _log(second) == ["1", "slow"] and schema_version(second, "owner") == 2
    first.close()
    second.close()
