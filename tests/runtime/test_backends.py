"""open_bus and open_store: the backend a URL names, and clear errors (passwords masked) when it cannot be had."""

from __future__ import annotations

from pathlib import Path

import pytest

from kairos.errors import ConfigError, StoreError
from kairos.runtime.backends import bus_stream, describe, open_bus, open_store
from kairos.runtime.bus import SqliteBus
from kairos.runtime.db import RuntimeDB
from kairos.storage.config import StorageConfig
from kairos.testing.servers import free_port

SECRET = "s3cr3t-pw"


@pytest.fixture
def db(tmp_path: Path) -> RuntimeDB:
    return RuntimeDB(tmp_path / "runtime.db")


def test_embedded_is_the_sqlite_bus(workspace: Path, db: RuntimeDB) -> None:
    bus = open_bus("embedded", workspace=workspace, db=db)
    try:
        assert isinstance(bus, SqliteBus)
    finally:
        bus.close()


def test_a_url_of_no_bus_is_a_config_error(workspace: Path, db: RuntimeDB) -> None:
    with pytest.raises(ConfigError, match=r"redis://u:\*\*\*@h") as caught:
        open_bus(f"redis://u:{SECRET}@h", workspace=workspace, db=db)
    assert SECRET not in str(caught.value)


def test_an_unreachable_nats_server_names_the_url_masked_and_how_to_start_one(workspace: Path, db: RuntimeDB) -> None:
    pytest.importorskip("nats", reason="nats-py is not installed: pip install -e '.[scale]'")
    from kairos.runtime.bus_nats import BusUnavailableError

    port = free_port()
    with pytest.raises(BusUnavailableError) as caught:
        open_bus(f"nats://kairos:{SECRET}@127.0.0.1:{port}", workspace=workspace, db=db)
    message = str(caught.value)
    assert f"nats://kairos:***@127.0.0.1:{port}" in message and "nats-server -js" in message
    assert SECRET not in message + caught.value.url
    with pytest.raises(BusUnavailableError) as caught:  # a token is a secret too
        open_bus(f"nats://{SECRET}@127.0.0.1:{port}", workspace=workspace, db=db)
    assert SECRET not in str(caught.value) and f"nats://***@127.0.0.1:{port}" in str(caught.value)


def test_nats_is_a_stream_per_workspace_or_per_deployment(
    workspace: Path, tmp_path: Path, db: RuntimeDB, nats_url: str, nats_stream: str
) -> None:
    from kairos.runtime.bus_nats import NatsBus, stream_name

    other = tmp_path / "other"
    other.mkdir()
    assert bus_stream(workspace) == stream_name(workspace) != bus_stream(other)
    assert bus_stream(workspace, "prod") == bus_stream(other, "prod") == "prod"
    bus = open_bus(nats_url, workspace=workspace, db=db, deployment=nats_stream)
    try:
        assert isinstance(bus, NatsBus) and bus.stream == nats_stream
        first = bus.publish("s1", "agent.delta", {"text": "hi"})
        assert [e.cursor for e in bus.history("s1", 0)] == [first.cursor]
    finally:
        bus.close()


def test_embedded_is_sqlite_and_a_postgresql_url_is_the_postgresql_store(workspace: Path, postgres_url: str) -> None:
    from kairos.context.store_pg import PostgresTrajectoryStore
    from kairos.context.store_sqlite import SqliteTrajectoryStore

    store = open_store("embedded", workspace)
    try:
        assert store.workspace == workspace.resolve() and isinstance(store.trajectories, SqliteTrajectoryStore)
    finally:
        store.close()
    store = open_store(postgres_url, workspace)
    try:
        assert isinstance(store.trajectories, PostgresTrajectoryStore)
        assert store.trajectories.has_session(store.trajectories.create_session("in postgres", {}))
    finally:
        store.close()
    with pytest.raises(ConfigError, match="neither"):
        open_store("mysql://db/k", workspace)


def test_an_unreachable_postgresql_names_the_url_masked(workspace: Path) -> None:
    pytest.importorskip("psycopg", reason="psycopg is not installed: pip install -e '.[scale]'")
    url = f"postgresql://kairos:{SECRET}@127.0.0.1:{free_port()}/k"
    with pytest.raises(StoreError, match="cannot be used") as caught:
        open_store(url, workspace)
    assert "postgresql://kairos:***@127.0.0.1:" in str(caught.value) and SECRET not in str(caught.value)


def test_describe_says_where_things_go_with_passwords_masked(workspace: Path) -> None:
    assert (
        describe(StorageConfig(), workspace) == "sessions in SQLite (.kairos/), events in SQLite (.kairos/runtime.db)"
    )
    line = describe(StorageConfig(bus=f"nats://u:{SECRET}@127.0.0.1:4222", deployment="prod"), workspace)
    assert line == "sessions in SQLite (.kairos/), events on NATS nats://u:***@127.0.0.1:4222 (stream prod)"
