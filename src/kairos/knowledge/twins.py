"""Context twins: the contextualised copy of a document, searched beside the document itself.

Contextual retrieval (:mod:`kairos.knowledge.contextual`) has a model write a sentence that situates each
chunk. Indexing only the contextualised chunks loses to the plain ones once the fusion has the conversation
signals (LoCoMo recall@10 on the development conversations: 0.820 against 0.825), while fusing four lists —
BM25 and dense over the plain chunks, BM25 and dense over the contextualised ones, each retriever's weight
split evenly between the two — gives 0.844 (``kairos bench locomo-retrieval --modes hybrid+contextual``).

So a contextual ingest stores the document as it is, plus a twin ``<source>#contexts`` of kind
:data:`CONTEXT_KIND` holding the chunks that got a context, at their positions, each naming its plain
document (``meta["twin_of"]``). Plain searches never see twins; a hybrid search maps each twin hit back to
its plain chunk *through the search's filters* (a twin never shows what its plain chunk would not: another
owner's, a private kind, a superseded version) and returns the plain chunk with its context in
``meta["context"]``. A plain document re-added without contexts leaves its twin pointing at the old
version, where current-version searches drop it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from kairos.knowledge.ingest import text_digest
from kairos.knowledge.records import ChunkHit, ChunkIn, DocumentIn, Filters, KnowledgeStore, StoredDocument

CONTEXT_KIND = "context"
"""The document kind of a context twin."""
TWIN_SUFFIX = "#contexts"
"""A document's context twin is stored as ``<source>#contexts``."""


def twin_of(plain: StoredDocument, chunks: Sequence[ChunkIn], contexts: Sequence[str | None]) -> tuple[
    DocumentIn, list[ChunkIn]
]:  # fmt: skip
    """The twin document of ``plain`` and its chunks: each of ``chunks`` that has a context.

    A twin chunk has its context ahead of its text and in ``meta["context"]``, and names ``plain`` in
    ``meta["twin_of"]``.
    """
    twins = [
        replace(c, text=f"Context: {context}\n{c.text}", meta={**c.meta, "context": context, "twin_of": plain.id})
        for c, context in zip(chunks, contexts, strict=True)
        if context
    ]
    digest = text_digest(f"{plain.id}\n" + "\n".join(c.text for c in twins))
    doc = DocumentIn(plain.source + TWIN_SUFFIX, CONTEXT_KIND, digest, plain.title, plain.owner, plain.valid_from,
                     None, plain.expires_at, {"twin_of": plain.source})  # fmt: skip
    return doc, twins


def twin_filters(filters: Filters) -> Filters:
    """What the twin lists search for a search with ``filters``: twins only, of the sources it allows.

    Kinds are judged on the plain chunk each twin hit maps to (:func:`plain_hits`), not here.
    """
    sources = tuple(s + TWIN_SUFFIX for s in filters.sources)
    return replace(filters, kind=CONTEXT_KIND, exclude_kinds=(), sources=sources)


def has_twins(store: KnowledgeStore) -> bool:
    """Whether any current document is a context twin (one indexed query; a plain search skips the twin lists)."""
    return bool(store.list_documents(Filters(kind=CONTEXT_KIND, include_expired=True), 0, 1))


def twin_hits(
    store: KnowledgeStore, search: Callable[[Filters], Sequence[ChunkHit]], filters: Filters
) -> list[ChunkHit]:
    """``search`` run over the twins a search with ``filters`` may see, mapped to their plain chunks (best first)."""
    return plain_hits(store, search(twin_filters(filters)), filters)


def plain_hits(store: KnowledgeStore, hits: Sequence[ChunkHit], filters: Filters) -> list[ChunkHit]:
    """The plain chunk of each twin hit that passes ``filters``, with the twin's score and context; best first."""
    wanted: dict[int, dict[int, ChunkHit]] = {}
    for hit in hits:
        doc = hit.meta.get("twin_of")
        if isinstance(doc, int):
            wanted.setdefault(doc, {}).setdefault(hit.position, hit)
    out: list[ChunkHit] = []
    for doc, at in wanted.items():
        for chunk, _ in store.chunks_with_vectors(doc, sorted(at), filters):
            twin = at[chunk.position]
            out.append(replace(chunk, score=twin.score, meta={**chunk.meta, "context": twin.meta.get("context")}))
    return sorted(out, key=lambda c: (-c.score, c.chunk_id))


__all__ = [
    "CONTEXT_KIND",
    "TWIN_SUFFIX",
    "has_twins",
    "plain_hits",
    "twin_filters",
    "twin_hits",
    "twin_of",
]
