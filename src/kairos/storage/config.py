"""``[storage]``: where sessions are stored and which event bus the runtime publishes on, as URLs.

``store`` is ``embedded`` (the default: SQLite in the workspace's ``.kairos/``) or a
``postgresql://`` URL; ``bus`` is ``embedded`` (SQLite in ``runtime.db``) or ``nats://host:port``
(several servers comma-separated; ``tls://`` for TLS). ``kairos serve --store URL --bus URL`` override
them. They are set in the user config (or a trusted workspace's ``kairos.toml``): an untrusted
workspace cannot choose where your sessions go (:func:`kairos.security.trust.restrict_untrusted`).

A URL may hold a password (``postgresql://user:secret@host/db``, ``nats://user:secret@host``, or a
NATS token ``nats://token@host``). :func:`mask_url` hides it, and every place kairos shows a URL uses
it: notices, errors, ``kairos config`` and ``/v1/settings`` (the JSON form of :class:`StorageConfig`
is masked; the Python form keeps the URL for connecting).
"""

from __future__ import annotations

import re
from typing import Literal, TypeAlias
from urllib.parse import SplitResult, urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

from kairos.errors import ConfigError

EMBEDDED = "embedded"
"""The value of ``store`` and ``bus`` that means the built-in SQLite backend."""
MASK = "***"
StoreKind: TypeAlias = Literal["embedded", "postgresql"]
BusKind: TypeAlias = Literal["embedded", "nats"]
_STORE_SCHEMES = {"postgresql": "postgresql", "postgres": "postgresql"}
_BUS_SCHEMES = {"nats": "nats", "tls": "nats"}
_TOKEN_SCHEMES = frozenset(_BUS_SCHEMES)
"""Schemes where a user name without a password is itself a secret (a NATS token)."""
_SECRET_QUERY = re.compile(r"(?i)((?:^|[?&;])(?:password|pass|token|sslpassword)=)[^&;#]*")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def mask_url(url: str) -> str:
    """``url`` with its password (or NATS token, or ``password=`` parameter) replaced by ``***``.

    Each comma-separated part is masked on its own (NATS takes a list of servers). Text that is not a
    URL is returned as it is.
    """
    return ",".join(_mask_one(part) for part in url.split(","))


def _mask_one(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK if "@" in url else url
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":" + MASK
        elif parts.scheme.lower() in _TOKEN_SCHEMES:
            userinfo = MASK
        netloc = f"{userinfo}@{host}"
    query = _SECRET_QUERY.sub(lambda m: m.group(1) + MASK, parts.query)
    return SplitResult(parts.scheme, netloc, parts.path, query, parts.fragment).geturl()


def _scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def store_kind(url: str) -> StoreKind:
    """Which backend a ``store`` value names.

    Raises:
        ValueError: it names none (the message shows the value masked).
    """
    if url in (EMBEDDED, "sqlite"):
        return "embedded"
    if _scheme(url) in _STORE_SCHEMES:
        return "postgresql"
    raise ValueError(f"store {mask_url(url)!r} is neither 'embedded' (SQLite) nor a postgresql:// URL")


def chosen_store(url: str) -> StoreKind:
    """:func:`store_kind` for the code that opens a store: a value naming none is a :class:`ConfigError`.

    Raises:
        ConfigError: ``url`` names no store (the message shows the value masked).
    """
    try:
        return store_kind(url)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def bus_kind(url: str) -> BusKind:
    """Which backend a ``bus`` value names.

    Raises:
        ValueError: it names none (the message shows the value masked).
    """
    if url in (EMBEDDED, "sqlite"):
        return "embedded"
    parts = [p.strip() for p in url.split(",")]
    if all(_scheme(p) in _BUS_SCHEMES and urlsplit(p).hostname for p in parts):
        return "nats"
    raise ValueError(
        f"bus {mask_url(url)!r} is neither 'embedded' (SQLite) nor a nats://host:port URL "
        "(several servers: comma-separated)"
    )


class StorageConfig(BaseModel):
    """``[storage]``: the session store and the event bus, each ``embedded`` or a server's URL."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    store: str = EMBEDDED
    """``embedded`` (SQLite in ``.kairos/``) or ``postgresql://user@host/db``."""
    bus: str = EMBEDDED
    """``embedded`` (SQLite in ``.kairos/runtime.db``) or ``nats://host:4222`` (a ``nats-server -js``)."""
    deployment: str | None = Field(None, description="the name the processes of one deployment share")
    """Names the deployment's NATS stream, so processes on several machines share it (letters, digits,
    ``_``, ``-``); None: a name derived from the workspace's path (one stream per workspace)."""
    leader_retry_s: float = Field(5.0, gt=0, le=300, description="seconds between tries for the leader lease")
    """With PostgreSQL, how often a process without the deployment's leader lease (timers, file watches,
    mail) tries to take it: a dead leader's work resumes within this long (:mod:`kairos.runtime.leader`)."""

    @field_validator("store")
    @classmethod
    def _store(cls, v: str) -> str:
        v = v.strip()
        return EMBEDDED if store_kind(v) == "embedded" else v

    @field_validator("bus")
    @classmethod
    def _bus(cls, v: str) -> str:
        v = v.strip()
        return EMBEDDED if bus_kind(v) == "embedded" else v

    @field_validator("deployment")
    @classmethod
    def _deployment(cls, v: str | None) -> str | None:
        if v is not None and not _NAME.fullmatch(v):
            raise ValueError("use letters, digits, '_' and '-' (at most 64)")
        return v

    @field_serializer("store", "bus", when_used="json")
    def _masked(self, v: str) -> str:
        """JSON (``kairos config``, ``/v1/settings``) never shows a password."""
        return mask_url(v)

    @property
    def store_kind(self) -> StoreKind:
        """The store's backend."""
        return store_kind(self.store)

    @property
    def bus_kind(self) -> BusKind:
        """The bus's backend."""
        return bus_kind(self.bus)

    def masked(self) -> dict[str, str | None]:
        """The settings as shown to people (passwords masked)."""
        return {"store": mask_url(self.store), "bus": mask_url(self.bus), "deployment": self.deployment}


__all__ = ["EMBEDDED", "BusKind", "StorageConfig", "StoreKind", "bus_kind", "chosen_store", "mask_url", "store_kind"]
