"""User memory: what kairos remembers about a user across sessions, on the knowledge base's storage layer.

:class:`UserMemory` is the entry point (``UserMemory.open(state_dir, embedder, model, user=...)``);
:mod:`kairos.memory.store` holds the versioned memories, :mod:`kairos.memory.extract` the
extractor, :mod:`kairos.memory.compress` importance and compression.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kairos.memory.core import CARDS_TAG, IngestReport, MemoryHit, Scrubber, UserMemory, check_user, render_card
    from kairos.memory.records import MemoryCard, MemoryIn, MemoryProvenance, MemoryStore, MemoryStoreError
    from kairos.memory.scrub import pii_scrubber
    from kairos.memory.store import SQLiteMemoryStore, open_memory_store
    from kairos.memory.store_pg import PgMemoryStore

_WHERE = {
    "CARDS_TAG": "core", "IngestReport": "core", "MemoryHit": "core", "Scrubber": "core", "UserMemory": "core",
    "check_user": "core", "render_card": "core", "MemoryCard": "records", "MemoryIn": "records",
    "MemoryProvenance": "records", "MemoryStore": "records", "MemoryStoreError": "records",
    "pii_scrubber": "scrub", "SQLiteMemoryStore": "store", "open_memory_store": "store", "PgMemoryStore": "store_pg",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    """Load the submodules on first use: ``kairos.config`` reads ``kairos.memory.config`` without the store."""
    if name in _WHERE:
        return getattr(importlib.import_module(f"kairos.memory.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'kairos.memory' has no attribute {name!r}")


__all__ = [
    "CARDS_TAG",
    "IngestReport",
    "MemoryCard",
    "MemoryHit",
    "MemoryIn",
    "MemoryProvenance",
    "MemoryStore",
    "MemoryStoreError",
    "PgMemoryStore",
    "SQLiteMemoryStore",
    "Scrubber",
    "UserMemory",
    "check_user",
    "open_memory_store",
    "pii_scrubber",
    "render_card",
]
