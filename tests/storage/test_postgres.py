"""PostgreSQL for kairos's stores: the install hint, errors that name the server without its password,
and versioned migrations (the same promises as the SQLite ones in ``test_migrations.py``)."""

from __future__ import annotations

import sys
import threading

import pytest

from kairos.errors import SchemaTooNewError, StoreError
from kairos.storage.config import mask_url
from kairos.storage.postgres import PgDatabase
from kairos.testing.servers import free_port


def test_a_url_is_shown_without_its_password() -> None:
    assert mask_url("postgresql://kairos:s3cret@db:5432/k") == "postgresql://kairos:***@db:5432/k"
    assert mask_url("postgresql://db/k?user=kairos&password=s3cret") == "postgresql://db/k?user=kairos&password=***"
    assert mask_url("postgresql://kairos@db/k") == "postgresql://kairos@db/k"


def test_without_psycopg_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg raises ImportError
    with pytest.raises(StoreError, match=r"pip install 'kairos-harness\[scale\]'"):
        PgDatabase("postgresql://localhost/k", "the session database")


def test_an_unreachable_server_is_a_store_error_naming_it_without_the_password() -> None:
    pytest.importorskip("psycopg", reason="psycopg is not installed: pip install -e '.[scale]'")
    port = free_port()
    with pytest.raises(StoreError) as info:
        PgDatabase(f"postgresql://kairos:s3cret@127.0.0.1:{port}/k", "the session database")
    message = str(info.value)
    assert "s3cret" not in message and f"postgresql://kairos:***@127.0.0.1:{port}/k" in message
    assert "check that PostgreSQL is running" in message


def test_a_malformed_url_says_how_to_write_one() -> None:
    pytest.importorskip("psycopg", reason="psycopg is not installed: pip install -e '.[scale]'")
    with pytest.raises(StoreError, match="is not a PostgreSQL URL") as info:
        PgDatabase("postgresql://kairos:s3 cret@db/k", "the session database")
    assert "s3 cret" not in str(info.value) and "postgresql://USER:PASSWORD@HOST:PORT/DB" in str(info.value)


def test_a_missing_database_is_named(postgres_url: str) -> None:
    url = postgres_url.rsplit("/", 1)[0] + "/no_such_db"
    with pytest.raises(StoreError, match='database "no_such_db" does not exist'):
        PgDatabase(url, "the session database")


def test_migrations_run_once_in_order_and_a_newer_schema_is_refused(postgres_url: str) -> None:
    db = PgDatabase(postgres_url, "a test database")
    steps = ["CREATE TABLE t (a INTEGER)", "ALTER TABLE t ADD COLUMN b TEXT; INSERT INTO t VALUES (1, 'x')"]
    assert db.migrate("owner", steps[:1]) == 0
    assert db.migrate("owner", steps) == 1
    assert db.migrate("owner", steps) == 2  # nothing left to do
    assert db.read("SELECT a, b FROM t") == [(1, "x")]
    with pytest.raises(SchemaTooNewError, match="newer kairos") as info:
        db.migrate("owner", steps[:1])
    assert (info.value.found, info.value.known) == (2, 1)
    db.close()


def test_processes_migrating_at_once_apply_each_step_once(postgres_url: str) -> None:
    dbs = [PgDatabase(postgres_url, "a test database") for _ in range(4)]
    steps = ["CREATE TABLE t (a INTEGER)", "INSERT INTO t VALUES (1)", "INSERT INTO t VALUES (2)"]
    errors: list[BaseException] = []

    def run(db: PgDatabase) -> None:
        try:
            db.migrate("owner", steps)
        except BaseException as e:  # reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(db,)) for db in dbs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert dbs[0].read("SELECT a FROM t ORDER BY a") == [(1,), (2,)]
    assert dbs[0].read("SELECT version FROM schema_versions WHERE owner = 'owner'") == [(3,)]
    for db in dbs:
        db.close()
