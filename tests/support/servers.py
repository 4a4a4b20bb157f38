"""pytest fixtures around :mod:`kairos.testing.servers` (real PostgreSQL and NATS JetStream on loopback).

One server of each kind per test session (started on first use, stopped at the end, also when tests
fail); each test gets its own database (:func:`postgres_url`) or its own stream name
(:func:`nats_stream`), so tests never see each other's data. Without the binaries the tests that use
them skip with the install hint (``make test-deps`` installs both).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from kairos.testing.servers import NatsServer, PostgresServer, ServerUnavailable


@pytest.fixture(name="postgres_server", scope="session")
def postgres_server_fixture() -> Iterator[PostgresServer]:
    """A private PostgreSQL cluster for the whole test session (superuser ``postgres``, trust auth)."""
    try:
        server = PostgresServer.start()
    except ServerUnavailable as e:
        pytest.skip(str(e))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(name="postgres_url")
def postgres_url_fixture(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of a new, empty database on the session's server (dropped after the test)."""
    try:
        import psycopg
    except ImportError:
        pytest.skip("psycopg is not installed: pip install -e '.[scale]' (make test installs it)")
    name = f"test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield postgres_server.url_for(name)
    finally:
        with psycopg.connect(postgres_server.url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(name="nats_server", scope="session")
def nats_server_fixture() -> Iterator[NatsServer]:
    """A private ``nats-server -js`` for the whole test session."""
    try:
        server = NatsServer.start()
    except ServerUnavailable as e:
        pytest.skip(str(e))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(name="nats_url")
def nats_url_fixture(nats_server: NatsServer) -> str:
    """``nats://127.0.0.1:<port>`` of the session's server (pair it with :func:`nats_stream`)."""
    return nats_server.url


@pytest.fixture(name="nats_stream")
def nats_stream_fixture() -> str:
    """A stream name no other test uses."""
    return f"test_{uuid.uuid4().hex[:16]}"


__all__ = [
    "nats_server_fixture",
    "nats_stream_fixture",
    "nats_url_fixture",
    "postgres_server_fixture",
    "postgres_url_fixture",
]
