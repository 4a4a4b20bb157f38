"""Storage shared by every kairos database: how a file is opened, migrated, and how its faults read.

:func:`connect` opens an SQLite file with the one PRAGMA set (:mod:`kairos.storage.sqlite`);
:func:`migrate` brings an owner's tables to the version this release knows
(:mod:`kairos.storage.migrations`). Faults raise the :class:`~kairos.errors.StoreError` tree.
"""

from __future__ import annotations

from kairos.storage.migrations import Migration, migrate, schema_version, statements
from kairos.storage.sqlite import BUSY_TIMEOUT_S, PRAGMAS, Connection, connect, unusable

__all__ = [
    "BUSY_TIMEOUT_S",
    "PRAGMAS",
    "Connection",
    "Migration",
    "connect",
    "migrate",
    "schema_version",
    "statements",
    "unusable",
]
