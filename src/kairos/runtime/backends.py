"""The runtime's backends, chosen by URL (``[storage]``, ``kairos serve --store/--bus``).

:func:`open_bus` gives the :class:`~kairos.runtime.bus.EventBus` a URL names: the embedded
:class:`~kairos.runtime.bus.SqliteBus` in ``runtime.db``, or a
:class:`~kairos.runtime.bus_nats.NatsBus` on a ``nats-server -js`` (one stream per workspace, or per
deployment when ``[storage] deployment`` names one). :func:`open_store` gives the session store:
the embedded SQLite store or :class:`~kairos.context.store_pg.PostgresTrajectoryStore`. URLs in
errors have their passwords masked (:func:`kairos.storage.config.mask_url`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kairos.context.session import SessionStore
from kairos.errors import ConfigError
from kairos.runtime.bus import EventBus, SqliteBus
from kairos.runtime.db import RuntimeDB
from kairos.storage.config import StorageConfig, bus_kind, chosen_store, mask_url

if TYPE_CHECKING:
    from kairos.runtime.workqueue import WorkQueue


def bus_stream(workspace: Path, deployment: str | None = None) -> str:
    """The NATS stream of a workspace: the deployment's name, else one derived from the workspace's path."""
    from kairos.runtime.bus_nats import stream_name

    return stream_name(deployment or workspace)


def open_bus(url: str, *, workspace: Path, db: RuntimeDB | None, deployment: str | None = None) -> EventBus:
    """The event bus ``url`` names: ``embedded`` (SQLite in ``db``) or ``nats://host:port``.

    Args:
        url: the bus setting (see :class:`~kairos.storage.config.StorageConfig`).
        workspace: the workspace, which names the NATS stream when ``deployment`` is None.
        db: the SQLite ``runtime.db`` (the embedded bus's table lives there; None: not needed for NATS).
        deployment: the name every process of a deployment shares (the NATS stream).

    Raises:
        ConfigError: ``url`` names no bus, or nats-py is missing (with the install hint).
        BusUnavailableError: the NATS server cannot be reached or has no JetStream; the message names
            the URL (masked) and says how to start one (``nats-server -js``).
    """
    try:
        kind = bus_kind(url)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if kind == "embedded":
        if db is None:
            raise ConfigError("the embedded bus keeps its events in runtime.db: open it (RuntimeDB) for the bus")
        return SqliteBus(db)
    from kairos.runtime.bus_nats import NatsBus

    return NatsBus(url, bus_stream(workspace, deployment))


def open_store(url: str, workspace: Path) -> SessionStore:
    """The session store ``url`` names: ``embedded`` (SQLite in ``.kairos/kairos.db``) or ``postgresql://…``.

    With PostgreSQL the trajectories (messages, the inbox, write leases) live in the database, and the
    runtime's own records too (:func:`kairos.runtime.db.open_records`).

    Raises:
        ConfigError: ``url`` names no store.
        StoreError: the store cannot be used (a PostgreSQL server that is down, psycopg missing); the
            message names it without its password.
    """
    kind = chosen_store(url)
    return SessionStore(workspace, db_path=url if kind == "postgresql" else None)


def open_work_queue(storage: StorageConfig, workspace: Path, *, ack_wait_s: float = 10.0) -> WorkQueue:
    """The deployment's work queue (``kairos worker``, ``kairos serve --no-worker``): NATS beside PostgreSQL.

    Raises:
        ConfigError: the store is not PostgreSQL or the bus is not NATS (workers share both), or
            nats-py is missing.
        BusUnavailableError: the NATS server cannot be reached.
    """
    if storage.store_kind != "postgresql" or storage.bus_kind != "nats":
        raise ConfigError(
            "several workers share their sessions in PostgreSQL and their work on NATS JetStream: pass "
            "--store postgresql://… and --bus nats://… (or set them in [storage] of your user config)"
        )
    from kairos.runtime.workqueue import WorkQueue

    return WorkQueue(storage.bus, bus_stream(workspace, storage.deployment), ack_wait_s=ack_wait_s)


def describe(storage: StorageConfig, workspace: Path) -> str:
    """One line on where sessions and events go, passwords masked (``kairos serve`` prints it)."""
    where = "SQLite (.kairos/)" if storage.store_kind == "embedded" else mask_url(storage.store)
    store = f"sessions in {where}"
    if storage.bus_kind == "embedded":
        return f"{store}, events in SQLite (.kairos/runtime.db)"
    return f"{store}, events on NATS {mask_url(storage.bus)} (stream {bus_stream(workspace, storage.deployment)})"


__all__ = ["bus_stream", "describe", "open_bus", "open_store", "open_work_queue"]
