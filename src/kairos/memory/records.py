"""What user memory stores: typed memory cards with provenance and version history, and the store protocol.

A memory has a ``key`` (its identity across versions) and one row per version. ``status`` says
which row is live: ``current`` (retrieved), ``superseded`` (an older value, kept in history),
``deleted`` (a tombstone: the memory left retrieval, its history stays), ``archived`` (merged into
a compressed summary). Only ``forget`` erases rows.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

if TYPE_CHECKING:
    from datetime import datetime

    import numpy.typing as npt

    from kairos.models.types import Message

from kairos.errors import StoreError

MemoryKind: TypeAlias = Literal["episodic", "semantic", "procedural"]
KINDS: tuple[MemoryKind, ...] = ("episodic", "semantic", "procedural")
CardFormat: TypeAlias = Literal["note", "enhanced_note", "json_card", "advanced_json_card"]
FORMATS: tuple[CardFormat, ...] = ("note", "enhanced_note", "json_card", "advanced_json_card")
Extractor: TypeAlias = Literal["typed", "facts"]
"""How the model reports memories: typed operations in the four formats, or plain fact sentences."""
Category: TypeAlias = Literal[
    "preference", "constraint", "fact", "plan", "relationship", "event", "account", "skill", "other"
]
CATEGORIES: tuple[Category, ...] = (
    "preference", "constraint", "fact", "plan", "relationship", "event", "account", "skill", "other",
)  # fmt: skip
PREFERENCE_LIKE: frozenset[str] = frozenset({"preference", "constraint"})
"""Categories that tell the agent what to do: they must come from the user, never from external content."""
Status: TypeAlias = Literal["current", "superseded", "deleted", "archived"]
Op: TypeAlias = Literal["add", "update", "supersede", "delete", "compress"]
Source: TypeAlias = Literal["user", "confirmed", "external", "harness"]
"""Whose words a memory rests on: the user's; the assistant's or a tool's that the user confirmed; external
content (memories of earlier versions); the harness's own (a compressed summary)."""


USER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
"""A user id: letters, digits, ``_.@-``, up to 64 (no path separators)."""


class MemoryStoreError(StoreError):
    """The memory store cannot be used or a memory operation is invalid (unknown id, another user's memory).

    A :class:`~kairos.errors.StoreError`, so one ``except`` covers every storage fault.
    """


class IngestHeldElsewhere(MemoryStoreError):
    """Another process (a worker of the deployment) is saving this session's memory now: nothing to do here."""


@dataclass(frozen=True, slots=True)
class MemoryProvenance:
    """Where a memory came from: the session, the messages it rests on, and whether the user said it."""

    session_id: str = ""
    messages: tuple[int, ...] = ()
    source: Source = "user"
    note: str = ""

    def to_json(self) -> str:
        """The stored form."""
        return json.dumps(
            {"session_id": self.session_id, "messages": list(self.messages), "source": self.source, "note": self.note},
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, text: str | None) -> MemoryProvenance:
        """Parse the stored form (an unreadable one is an empty provenance marked harness)."""
        try:
            data = json.loads(text or "{}")
            src = data.get("source", "harness")
            return cls(
                str(data.get("session_id", "")),
                tuple(int(i) for i in data.get("messages", ())),
                src if src in ("user", "confirmed", "external", "harness") else "harness",
                str(data.get("note", "")),
            )
        except (ValueError, TypeError, AttributeError):
            return cls(source="harness")


@dataclass(slots=True)
class MemoryCard:
    """One version of a memory.

    ``content`` is the text form every format has (what BM25, the embedder and the model read).
    ``data`` holds a format's structure: a JSON card's ``path`` (category.subcategory.key) and
    ``value``; an advanced card's ``person``, ``relationship``, ``backstory`` and ``timestamp``.
    """

    id: int
    key: str
    owner: str
    kind: MemoryKind
    format: CardFormat
    category: Category
    content: str
    data: dict[str, Any]
    importance: float
    version: int
    status: Status
    op: Op
    created_at: float
    valid_from: float | None
    valid_to: float | None
    expires_at: float | None
    provenance: MemoryProvenance
    accesses: int = 0
    replaces: int | None = None
    """The row this version followed (None for a first version)."""

    @property
    def external(self) -> bool:
        """Whether it rests on external content (kept as cited data, never as an instruction)."""
        return self.provenance.source == "external"


@dataclass(slots=True)
class MemoryIn:
    """A memory to write (the store assigns id, version and status)."""

    kind: MemoryKind
    format: CardFormat
    category: Category
    content: str
    data: dict[str, Any] = field(default_factory=dict)
    importance: float = 0.5
    valid_from: float | None = None
    expires_at: float | None = None
    provenance: MemoryProvenance = field(default_factory=MemoryProvenance)


def searchable(content: str, data: dict[str, Any]) -> str:
    """What BM25 and the embedder index: the content plus a card's path, value, person, relationship, backstory."""
    extra = [str(data[k]) for k in ("path", "value", "person", "relationship", "backstory") if data.get(k)]
    return " | ".join([content, *extra]) if extra else content


@dataclass(slots=True)
class IngestReport:
    """What one ingest did: memories written (by operation), refused (with the reason) and indexed rounds."""

    session_id: str
    applied: list[tuple[str, MemoryCard]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    rounds_indexed: int = 0
    compressed: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    """Where the time went: ``scrub``, ``index``, ``extract``, ``notes``, ``compress`` (the model calls dominate)."""
    extracted: bool = False
    """False when the extractor failed or was not run (no model); the conversation is still indexed."""
    note: str = ""
    """Why nothing was done ("already ingested"), or what was repaired first (an interrupted attempt undone)."""


@dataclass(frozen=True, slots=True)
class PendingIngest:
    """A session in the ingest ledger that was never ingested to the end: its first ``messages``, dated ``at``."""

    session_id: str
    messages: int
    at: datetime
    digest: str

    def matches(self, messages: Sequence[Message]) -> bool:
        """Whether ``messages`` are the ones the ledger expects."""
        return len(messages) == self.messages and session_digest(messages) == self.digest


def session_digest(messages: Sequence[Message]) -> str:
    """Names a session's content in the ingest ledger (roles and texts: the same conversation, the same digest)."""
    h = hashlib.sha256()
    for m in messages:
        h.update(f"{m.role}\x00{m.content}\x1e".encode())
    return h.hexdigest()[:32]


class MemoryStore(Protocol):
    """Versioned memories per owner with full-text and dense retrieval (SQLite, or PostgreSQL: ``store_pg``).

    Every write is one transaction: a failed write leaves no row, full-text entry or vector behind.
    """

    def add(self, owner: str, memory: MemoryIn, vector: npt.ArrayLike, *, op: Op = "add") -> MemoryCard:
        """Store a new memory (version 1)."""
        ...

    def revise(self, owner: str, memory_id: int, memory: MemoryIn, vector: npt.ArrayLike, *, op: Op) -> MemoryCard:
        """A new current version of ``memory_id`` (``update`` or ``supersede``); the old one stays in history."""
        ...

    def delete(self, owner: str, memory_id: int, *, provenance: MemoryProvenance) -> MemoryCard:
        """Tombstone: the memory leaves retrieval, its history stays."""
        ...

    def archive(self, owner: str, memory_ids: Sequence[int], summary: MemoryIn, vector: npt.ArrayLike) -> MemoryCard:
        """Replace several memories by one summary (compression); the originals stay in history as ``archived``."""
        ...

    def forget(self, owner: str, memory_id: int | None = None) -> int:
        """Erase a memory's every version (None: all of the owner's memories); returns the rows erased."""
        ...

    def get(self, owner: str, memory_id: int) -> MemoryCard | None:
        """One row by id (any status)."""
        ...

    def current(self, owner: str, limit: int = 1000) -> list[MemoryCard]:
        """The owner's live memories, most important first."""
        ...

    def count(self, owner: str) -> int:
        """How many live memories ``owner`` has."""
        ...

    def history(self, owner: str, key: str | None = None) -> list[MemoryCard]:
        """Every version (of one memory, or of all), oldest first."""
        ...

    def search_bm25(self, owner: str, query: str, k: int) -> list[tuple[MemoryCard, float]]:
        """Full-text top ``k`` among the owner's live memories."""
        ...

    def search_dense(self, owner: str, vector: npt.ArrayLike, k: int) -> list[tuple[MemoryCard, float]]:
        """Cosine top ``k`` among the owner's live memories."""
        ...

    def vectors(self, owner: str) -> tuple[list[MemoryCard], Any]:
        """The owner's live memories and their vectors (one row each), for clustering."""
        ...

    def touch(self, ids: Sequence[int]) -> None:
        """Count an access (retrieval into context) for each memory."""
        ...

    def expect_ingest(self, owner: str, session_id: str, digest: str, messages: int, at: float) -> bool:
        """Record a session to ingest (``digest`` of its messages); False when it already was."""
        ...

    def begin_ingest(self, owner: str, session_id: str, digest: str) -> int:
        """Start an attempt, rolling back an earlier one that never finished (returns the rows undone)."""
        ...

    def end_ingest(self, owner: str, session_id: str, digest: str) -> None:
        """The attempt finished (its kept steps go)."""
        ...

    def ingested(self, owner: str, session_id: str) -> list[tuple[str, int]]:
        """(digest, messages) of the finished ingests of a session, the longest first."""
        ...

    def step(self, owner: str, session_id: str, digest: str, step: str) -> str | None:
        """A step's kept result (a model's answer) for an unfinished ingest, or None."""
        ...

    def keep_step(self, owner: str, session_id: str, digest: str, step: str, value: str) -> None:
        """Keep a step's result until the ingest ends (an interrupted attempt resumes after it)."""
        ...

    def unfinished_ingests(self, owner: str) -> list[tuple[str, str, int, float]]:
        """(session id, digest, messages, at) of ingests never finished, oldest first."""
        ...

    def close(self) -> None:
        """Close the database."""
        ...


__all__ = [
    "CATEGORIES",
    "FORMATS",
    "KINDS",
    "PREFERENCE_LIKE",
    "USER_ID",
    "CardFormat",
    "Category",
    "IngestReport",
    "MemoryCard",
    "MemoryIn",
    "MemoryKind",
    "MemoryProvenance",
    "MemoryStore",
    "MemoryStoreError",
    "Op",
    "PendingIngest",
    "Source",
    "Status",
    "searchable",
    "session_digest",
]
