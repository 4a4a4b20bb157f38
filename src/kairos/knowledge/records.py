"""What the knowledge store takes and returns, its filters, and the :class:`KnowledgeStore` protocol.

Two backends implement the protocol — :class:`~kairos.knowledge.store.SQLiteKnowledgeStore` (one
workspace) and :class:`~kairos.knowledge.store_pg.PgKnowledgeStore` (PostgreSQL, for several
machines); these records are the contract between them, :mod:`kairos.knowledge.base` and the tools.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from kairos.retrieval.text import query_words

if TYPE_CHECKING:
    from kairos.knowledge.stages import StageClock
    from kairos.retrieval.embeddings import Vectors
    from kairos.storage import Migration


@dataclass(slots=True)
class DocumentIn:
    """A document to store; ``digest`` identifies its content (an unchanged re-add is a no-op)."""

    source: str
    kind: str
    digest: str
    title: str = ""
    owner: str | None = None
    valid_from: float | None = None
    valid_to: float | None = None
    expires_at: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ChunkIn:
    """One chunk of a document, with optional own validity (a conversation turn's date, say)."""

    text: str
    position: int
    meta: dict[str, Any] = field(default_factory=dict)
    valid_from: float | None = None


@dataclass(slots=True)
class StoredDocument:
    """A document as stored."""

    id: int
    source: str
    version: int
    digest: str
    kind: str
    title: str
    owner: str | None
    current: bool
    added_at: float
    valid_from: float | None
    valid_to: float | None
    expires_at: float | None
    meta: dict[str, Any]
    chunks: int = 0


@dataclass(slots=True)
class ChunkHit:
    """A retrieved chunk and its score (higher is better; the scale depends on the retriever)."""

    chunk_id: int
    doc_id: int
    source: str
    version: int
    position: int
    text: str
    score: float
    meta: dict[str, Any]
    title: str = ""
    current: bool = True


@dataclass(frozen=True, slots=True)
class Filters:
    """Metadata filters applied inside retrieval.

    Attributes:
        owner: only chunks of this owner (None: any owner).
        sources: only these exact sources.
        source_prefix: only sources that start with this.
        kind: only documents of this kind (``markdown``, ``pdf``, ``conversation``…).
        at: only chunks valid at this time (unix seconds; None: now, or no limit with ``all_versions``).
        include_expired: keep chunks past their expiry.
        all_versions: search superseded versions too (default: only each source's current one).
        exclude_kinds: leave out documents of these kinds (the agent's ``kb_*`` tools leave out users'
            ``conversation`` transcripts, which only that user's ``memory_search`` may read).
    """

    owner: str | None = None
    sources: tuple[str, ...] = ()
    source_prefix: str | None = None
    kind: str | None = None
    at: float | None = None
    include_expired: bool = False
    all_versions: bool = False
    exclude_kinds: tuple[str, ...] = ()

    def without_kind(self, kind: str) -> Filters:
        """These filters leaving documents of ``kind`` out too, unless they ask for that kind by name."""
        if self.kind == kind or kind in self.exclude_kinds:
            return self
        return replace(self, exclude_kinds=(*self.exclude_kinds, kind))

    def sql(self, now: float) -> tuple[str, list[Any]]:
        """A WHERE fragment over ``c`` (chunks) and ``d`` (documents), and its parameters."""
        parts: list[str] = []
        args: list[Any] = []
        if self.owner is not None:
            parts.append("c.owner = ?")
            args.append(self.owner)
        if self.sources:
            parts.append(f"c.source IN ({','.join('?' * len(self.sources))})")
            args.extend(self.sources)
        if self.source_prefix:
            escaped = self.source_prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            parts.append("c.source LIKE ? ESCAPE '\\'")
            args.append(escaped + "%")
        if self.kind:
            parts.append("d.kind = ?")
            args.append(self.kind)
        if self.exclude_kinds:
            parts.append(f"d.kind NOT IN ({','.join('?' * len(self.exclude_kinds))})")
            args.extend(self.exclude_kinds)
        if not self.all_versions:
            parts.append("d.current = 1")
        if self.at is not None or not self.all_versions:  # all versions, no time given: the whole history
            at = now if self.at is None else self.at
            parts.append("(c.valid_from IS NULL OR c.valid_from <= ?) AND (c.valid_to IS NULL OR c.valid_to > ?)")
            args.extend([at, at])
        if not self.include_expired:
            parts.append("(c.expires_at IS NULL OR c.expires_at > ?)")
            args.append(now)
        return " AND ".join(parts), args


NO_FILTERS = Filters()
"""Current versions, valid now, not expired, any owner or source."""


def fts_query(text: str) -> str | None:
    """An FTS5 OR-query of the words of ``text`` (:func:`~kairos.retrieval.text.query_words`); None if empty.

    User memory's SQLite store searches with it (:mod:`kairos.memory.store`); the knowledge base's tantivy
    index takes the words themselves.
    """
    unique = query_words(text)
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in unique) if unique else None


class Cursor(Protocol):
    """The rows of a statement on :class:`SideTables` (an ``sqlite3`` or a psycopg cursor)."""

    def fetchone(self) -> Any:
        """The next row, or None."""
        ...

    def fetchall(self) -> list[Any]:
        """The remaining rows."""
        ...

    def __iter__(self) -> Iterator[Any]: ...


class SideTables(Protocol):
    """A connection to other owners' tables beside the chunks (the entity graph's), on either backend.

    Statements take ``?`` placeholders and SQL that both SQLite and PostgreSQL run (``ON CONFLICT``,
    ``RETURNING``); the chunks and documents tables are named by the store's ``CHUNKS`` and ``DOCUMENTS``.
    """

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Cursor:
        """Run one statement (in the block's transaction); fetch its rows from the cursor."""
        ...

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> object:
        """Run one statement over many rows."""
        ...


class KnowledgeStore(Protocol):
    """Documents, chunks and vectors with filtered BM25 and dense retrieval (SQLite or PostgreSQL)."""

    DOCUMENTS: ClassVar[str]
    """The documents table's name (``documents``; ``kb_documents`` in PostgreSQL)."""
    CHUNKS: ClassVar[str]
    """The chunks table's name (``chunks``; ``kb_chunks`` in PostgreSQL)."""

    clock: StageClock
    """Seconds spent per ingest stage."""
    state_dir: Path
    """The workspace's state dir (the embedded store's files; a PostgreSQL store's index caches)."""

    def add_document(
        self, doc: DocumentIn, chunks: Iterable[tuple[ChunkIn, npt.ArrayLike | None]]
    ) -> tuple[StoredDocument, StoredDocument | None]:
        """Store a document and its chunks (each with a vector or None) in one transaction.

        Returns the stored document and the version it replaced.
        """
        ...

    def without_vectors(self, limit: int, after: int = 0) -> list[tuple[int, str]]:
        """(id, text) of chunks stored without a vector, ids above ``after``."""
        ...

    def count_without_vectors(self) -> int:
        """Chunks stored without a vector."""
        ...

    def set_vectors(self, vectors: Sequence[tuple[int, npt.ArrayLike]]) -> int:
        """Give chunks stored without a vector their vectors; returns how many were set."""
        ...

    def find_current(self, source: str) -> StoredDocument | None:
        """The current version of ``source``."""
        ...

    def remove_source(self, source: str) -> int:
        """Delete every version of ``source``; returns how many documents went."""
        ...

    def get_document(self, source: str, version: int | None = None) -> StoredDocument | None:
        """A version of ``source`` (None: the current one)."""
        ...

    def document_chunks(self, doc_id: int, offset: int = 0, limit: int = 100) -> list[ChunkHit]:
        """A document's chunks in order."""
        ...

    def list_documents(self, filters: Filters = ..., offset: int = 0, limit: int = 50) -> list[StoredDocument]:
        """Documents, newest source first."""
        ...

    def search_bm25(self, query: str, k: int, filters: Filters = ...) -> list[ChunkHit]:
        """Full-text BM25 top ``k`` among the chunks that pass ``filters``."""
        ...

    def search_dense(self, vector: Vectors, k: int, filters: Filters = ...) -> list[ChunkHit]:
        """Nearest ``k`` chunks by cosine among those that pass ``filters``."""
        ...

    def stats(self) -> dict[str, Any]:
        """Counts and sizes."""
        ...

    def close(self) -> None:
        """Save the index and close."""
        ...

    def versions(self, source: str) -> list[StoredDocument]:
        """Every stored version of ``source``, oldest first."""
        ...

    def chunks_by_id(self, ids: Sequence[int], filters: Filters | None = None) -> list[ChunkHit]:
        """The chunks with these ids (those passing ``filters``), in the order of ``ids``."""
        ...

    def chunks_with_vectors(
        self, doc_id: int, positions: Sequence[int] | None = None, filters: Filters | None = None
    ) -> list[tuple[ChunkHit, npt.NDArray[np.float32]]]:
        """A document's chunks with their vectors, in position order."""
        ...

    def flush(self) -> None:
        """Save the vector index if it changed."""
        ...

    def rebuild_index(self) -> None:
        """Rebuild the vector index from the stored vectors."""
        ...

    def check(self) -> dict[str, int]:
        """Row counts that must agree: chunks, full-text documents, vectors, orphan chunks."""
        ...

    def ensure(self, owner: str, migrations: Sequence[Migration]) -> None:
        """Bring another owner's tables beside the chunks (the entity graph's) to their version."""
        ...

    def read(self) -> AbstractContextManager[SideTables]:
        """A connection for reads of those tables (with the chunks and documents)."""
        ...

    def write(self) -> AbstractContextManager[SideTables]:
        """One write transaction on those tables: all of it or nothing."""
        ...
