"""User memory: what kairos remembers about a user across sessions, on the knowledge base's storage layer.

:class:`UserMemory` is the entry point (``UserMemory.open(state_dir, embedder, model, user=...)``);
:mod:`kairos.memory.store` holds the versioned memories, :mod:`kairos.memory.extract` the
extractor, :mod:`kairos.memory.compress` importance and compression.
"""

from kairos.memory.core import CARDS_TAG, IngestReport, MemoryHit, Scrubber, UserMemory, check_user, render_card
from kairos.memory.records import (
    MemoryCard,
    MemoryIn,
    MemoryProvenance,
    MemoryStore,
    MemoryStoreError,
)
from kairos.memory.scrub import pii_scrubber
from kairos.memory.store import SQLiteMemoryStore

__all__ = [
    "CARDS_TAG",
    "IngestReport",
    "MemoryCard",
    "MemoryHit",
    "MemoryIn",
    "MemoryProvenance",
    "MemoryStore",
    "MemoryStoreError",
    "SQLiteMemoryStore",
    "Scrubber",
    "UserMemory",
    "check_user",
    "pii_scrubber",
    "render_card",
]
