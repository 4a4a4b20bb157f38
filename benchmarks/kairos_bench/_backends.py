"""The store and bus a serve bench runs on: embedded (the default) or real PostgreSQL and NATS JetStream.

``store="postgresql"`` / ``bus="nats"`` start private servers on loopback
(:class:`kairos.testing.servers.PostgresServer` / :class:`~kairos.testing.servers.NatsServer`, each in
a temporary directory, stopped afterwards); a full URL (``postgresql://…``, ``nats://…``) uses that
server instead. A started PostgreSQL gets a new database per workspace, so repeated runs (the crash
bench's) never see each other's sessions; a NATS stream is already per workspace. The URLs reach the
JSON through :func:`kairos.storage.config.mask_url`.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kairos.context.session import SessionStore
from kairos.errors import ConfigError
from kairos.runtime.backends import open_store
from kairos.storage.config import mask_url
from kairos.testing.servers import NatsServer, PostgresServer

EMBEDDED = "embedded"


@dataclass
class Backends:
    """What ``kairos serve`` gets as ``--store``/``--bus``, and how the bench reads the store back."""

    store: str = EMBEDDED
    bus: str = EMBEDDED
    pg: PostgresServer | None = field(default=None, repr=False)
    """The PostgreSQL this bench started (None: embedded, or a URL given): new databases come from it."""

    def store_for(self, label: str) -> str:
        """The store URL for one workspace: a new database on a started PostgreSQL, else :attr:`store`."""
        if self.pg is None:
            return self.store
        import psycopg

        name = f"bench_{label}_{uuid.uuid4().hex[:8]}".lower()
        with psycopg.connect(self.pg.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.pg.url_for(name)

    def params(self) -> dict[str, str]:
        """``store``/``bus`` for the JSON (passwords masked; a started server is named, not its port)."""
        store = "postgresql (started by the bench)" if self.pg is not None else mask_url(self.store)
        return {"store": store, "bus": mask_url(self.bus)}


def serve_args(store: str, bus: str) -> list[str]:
    """``--store URL --bus URL`` for ``kairos serve`` (nothing for the embedded ones: today's command line)."""
    args: list[str] = []
    if store != EMBEDDED:
        args += ["--store", store]
    if bus != EMBEDDED:
        args += ["--bus", bus]
    return args


def read_store(workspace: Path, store: str) -> SessionStore:
    """The session store a stopped server wrote to (the embedded one in ``workspace/.kairos``)."""
    if store == EMBEDDED:
        return SessionStore(workspace, state_dir=workspace / ".kairos")
    return open_store(store, workspace)


@contextlib.contextmanager
def backends(store: str | None = None, bus: str | None = None) -> Iterator[Backends]:
    """Resolve ``store``/``bus`` (``embedded``, ``postgresql``/``nats``: start one, or a URL); stop what was started.

    Raises:
        ConfigError: a value that is none of those (``kairos bench`` prints it).
        kairos.testing.servers.ServerUnavailable: PostgreSQL or nats-server is not installed or did not start.
    """
    store, bus = store or EMBEDDED, bus or EMBEDDED
    if store not in (EMBEDDED, "postgresql", "postgres") and not store.startswith(("postgresql://", "postgres://")):
        raise ConfigError(f"--store: embedded, postgresql or a postgresql:// URL, not {store!r}")
    if bus not in (EMBEDDED, "nats") and not bus.startswith("nats://"):
        raise ConfigError(f"--bus: embedded, nats or a nats:// URL, not {bus!r}")
    with contextlib.ExitStack() as stack:
        pg = None
        if store in ("postgresql", "postgres"):
            pg = PostgresServer.start()
            stack.callback(pg.stop)
            store = pg.url
        if bus == "nats":
            nats = NatsServer.start()
            stack.callback(nats.stop)
            bus = nats.url
        yield Backends(store, bus, pg)


__all__ = ["EMBEDDED", "Backends", "backends", "read_store", "serve_args"]
