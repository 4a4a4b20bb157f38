"""The loopback servers the storage and bus tests run against (kairos.testing.servers)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kairos.testing.servers import NatsServer, PostgresServer, ServerUnavailable

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed: pip install -e '.[scale]'")


def _gone(pid: int) -> bool:
    """No process of the group is left (a zombie waiting for init to reap it counts as gone)."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


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


_STARTER = """
import sys
from kairos.testing.servers import NatsServer, PostgresServer
servers = [PostgresServer.start(), NatsServer.start()]
print(*(s.pid for s in servers), *(s.root for s in servers), flush=True)
sys.stdin.read()
"""


def test_servers_die_with_a_starter_killed_by_sigkill() -> None:
    """kill -9 of the test process (or `timeout pytest`) runs no cleanup: the kernel kills the servers."""
    starter = subprocess.Popen(
        [sys.executable, "-c", _STARTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert starter.stdout is not None
    line = starter.stdout.readline().decode()
    if not line.strip():
        starter.kill()
        _, err = starter.communicate(timeout=30)
        if b"ServerUnavailable" in err:
            pytest.skip(err.decode().strip().splitlines()[-1])
        raise AssertionError(err.decode())
    pids, roots = [int(p) for p in line.split()[:2]], line.split()[2:]
    starter.send_signal(signal.SIGKILL)
    starter.communicate(timeout=30)
    deadline = time.monotonic() + 15
    while not all(_gone(pid) for pid in pids):
        if time.monotonic() > deadline:
            for pid in pids:  # never leave them behind, even when this test fails
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            raise AssertionError(f"servers {pids} outlived their starter")
        time.sleep(0.05)
    for root in roots:  # what the next start would sweep
        shutil.rmtree(root, ignore_errors=True)
