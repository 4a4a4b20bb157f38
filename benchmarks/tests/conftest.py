"""Fixtures the bench smoke tests share."""

from __future__ import annotations

import pytest


@pytest.fixture
def scale_deps() -> None:
    """Skip without PostgreSQL, nats-server, psycopg or nats-py (as tests/support/servers.py's fixtures do)."""
    from kairos.testing.servers import find_nats_server, find_postgres_bin

    pytest.importorskip("psycopg", reason="psycopg is not installed: pip install -e '.[scale]'")
    pytest.importorskip("nats", reason="nats-py is not installed: pip install -e '.[scale]'")
    if find_postgres_bin() is None or find_nats_server() is None:
        pytest.skip("PostgreSQL or nats-server is not installed (make test-deps)")
