"""The loopback servers the storage and bus tests run against (kairos.testing.servers)."""

from __future__ import annotations

import os
import socket

import pytest

from kairos.testing.servers import NatsServer, PostgresServer, ServerUnavailable

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed: pip install -e '.[scale]'")


def _gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_test_gets_a_fresh_database_on_the_session_server(postgres_url: str, postgres_server: PostgresServer) -> None:
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        name = conn.execute("SELECT current_database()").fetchone()
        assert name is not None and name[0].startswith("test_")
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
        assert tables == (0,)
        conn.execute("CREATE TABLE t (x int)")
        conn.execute("INSERT INTO t VALUES (1)")
        conn.commit()
    assert postgres_url.startswith(f"postgresql://postgres@127.0.0.1:{postgres_server.port}/")
    assert postgres_server.startup_s < 30


async def test_the_fresh_database_takes_async_connections(postgres_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
        cur = await conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
        assert await cur.fetchone() == (0,)  # nothing left over from another test's database


def test_postgres_stops_with_its_whole_process_group() -> None:
    try:
        server = PostgresServer.start()
    except ServerUnavailable as e:
        pytest.skip(str(e))
    pid = server.pid
    assert pid is not None
    try:
        conn = psycopg.connect(server.url, autocommit=True)  # a backend process of its own
        assert conn.execute("SELECT 1").fetchone() == (1,)
        server.halt()
        assert _gone(pid)
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
        conn.close()
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(server.url, connect_timeout=2)
        server.run()  # a server coming back keeps its data
        with psycopg.connect(server.url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        server.stop()
    assert not server.root.exists()


def test_nats_serves_on_loopback_and_stops(nats_server: NatsServer) -> None:
    with socket.create_connection(("127.0.0.1", nats_server.port), timeout=5) as conn:
        assert conn.recv(4096).startswith(b"INFO ")
    assert nats_server.url == f"nats://127.0.0.1:{nats_server.port}"
    try:
        other = NatsServer.start()
    except ServerUnavailable as e:
        pytest.skip(str(e))
    pid = other.pid
    assert pid is not None
    other.stop()
    assert _gone(pid) and not other.root.exists()
