"""What the two knowledge stores share: the row layout, every read, and filtered retrieval's widening loops.

Both stores keep the same columns — :class:`~kairos.knowledge.store.SQLiteKnowledgeStore` in
``documents`` and ``chunks``, :class:`~kairos.knowledge.store_pg.PgKnowledgeStore` in
``kb_documents`` and ``kb_chunks`` — so each read is written once here, with ``?`` placeholders and
``{D}``/``{C}`` for the two tables, and a store runs it through its :meth:`RowReads._run`.

Filtered retrieval: the BM25 and HNSW indexes return a top list; the filters that can change after
a chunk is written (validity, expiry, "current version") are judged in SQL on that list, which is
over-fetched and widened (×4 each round) until ``k`` hits pass or the matches run out. Dense search,
once the whole index was fetched and still fewer pass (a very selective filter), scores the
filtered rows' stored vectors exactly.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from kairos.errors import StoreError
from kairos.knowledge.records import NO_FILTERS, ChunkHit, ChunkIn, DocumentIn, Filters, StoredDocument

if TYPE_CHECKING:
    from kairos.retrieval.embeddings import Vectors

Rows = list[Sequence[Any]]
Scored = list[tuple[int, float]]
"""``(chunk id, score)`` pairs, best first: what an index returns."""

DOC_COLS = "id, source, version, digest, kind, title, owner, current, added_at, valid_from, valid_to, expires_at, meta"
HIT_COLS = "c.id, c.doc_id, c.source, c.version, c.position, c.text, c.meta, d.title, d.current"
JOIN = "FROM {C} c JOIN {D} d ON d.id = c.doc_id"
BM25_ROWS = "SELECT c.id, c.text, c.owner, c.source, d.kind " + JOIN
"""What the full-text index holds of a chunk (:meth:`kairos.knowledge.bm25.TantivyBM25.apply`)."""
_BATCH = 500


def doc_of(row: Sequence[Any], chunks: int = 0) -> StoredDocument:
    """A :data:`DOC_COLS` row as a document."""
    return StoredDocument(
        row[0], row[1], row[2], row[3], row[4], row[5], row[6], bool(row[7]), row[8], row[9], row[10], row[11],
        json.loads(row[12]), chunks,
    )  # fmt: skip


def hit_of(row: Sequence[Any], score: float) -> ChunkHit:
    """A :data:`HIT_COLS` row as a hit."""
    return ChunkHit(row[0], row[1], row[2], row[3], row[4], row[5], score, json.loads(row[6]), row[7], bool(row[8]))


def checked(vector: npt.ArrayLike, dim: int) -> npt.NDArray[np.float32]:
    """``vector`` as float32 of length ``dim``.

    Raises:
        StoreError: it has another length.
    """
    vec = np.asarray(vector, dtype=np.float32).reshape(-1)
    if vec.shape[0] != dim:
        raise StoreError(f"a vector of {vec.shape[0]} dimensions for an index of {dim}")
    return vec


def stacked(blobs: Sequence[Any]) -> npt.NDArray[np.float32]:
    """Stored vectors (bytes of float32) as an (n, dim) array."""
    return np.frombuffer(b"".join(bytes(b) for b in blobs), dtype=np.float32).reshape(len(blobs), -1)


def marks(n: int) -> str:
    """``?,?,…`` for ``n`` parameters."""
    return ",".join("?" * n)


def insert_version(
    run: Callable[[str, Sequence[Any]], Rows], insert: Callable[[str, Sequence[Any]], int], doc: DocumentIn,
    chunks: Iterable[tuple[ChunkIn, npt.ArrayLike | None]], previous: StoredDocument | None, dim: int,
) -> tuple[int, list[int], dict[int, npt.NDArray[np.float32]]]:  # fmt: skip
    """Inside a write transaction: close ``previous``, insert ``doc`` as its source's next version, and its chunks.

    ``run`` executes a statement (``?`` placeholders, ``{D}``/``{C}`` tables), ``insert`` an INSERT and
    returns the new row's id. Returns the new version, the chunk ids, and the vectors of those that have one.
    """
    now = time.time()
    version = 1 + int(run("SELECT coalesce(max(version), 0) FROM {D} WHERE source = ?", [doc.source])[0][0])
    if previous is not None:
        closed = doc.valid_from or now
        run("UPDATE {D} SET current = 0, valid_to = coalesce(valid_to, ?) WHERE id = ?", [closed, previous.id])
        run("UPDATE {C} SET valid_to = coalesce(valid_to, ?) WHERE doc_id = ?", [closed, previous.id])
    doc_id = insert(
        "INSERT INTO {D} (source, version, digest, kind, title, owner, current, added_at, valid_from, valid_to,"
        " expires_at, meta) VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?)",
        [
            doc.source, version, doc.digest, doc.kind, doc.title, doc.owner, now, doc.valid_from, doc.valid_to,
            doc.expires_at, json.dumps(doc.meta, ensure_ascii=False),
        ],
    )  # fmt: skip
    keys: list[int] = []
    vecs: dict[int, npt.NDArray[np.float32]] = {}
    for chunk, vector in chunks:
        vec = None if vector is None else checked(vector, dim)
        keys.append(insert(
            "INSERT INTO {C} (doc_id, source, version, position, text, owner, valid_from, valid_to, expires_at, meta,"
            " vector) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                doc_id, doc.source, version, chunk.position, chunk.text, doc.owner,
                chunk.valid_from if chunk.valid_from is not None else doc.valid_from, doc.valid_to, doc.expires_at,
                json.dumps(chunk.meta, ensure_ascii=False), None if vec is None else vec.tobytes(),
            ],
        ))  # fmt: skip
        if vec is not None:
            vecs[keys[-1]] = vec
    return version, keys, vecs


class RowReads:
    """Every read of a knowledge store, over :meth:`_run` (one statement with ``?`` placeholders)."""

    DOCUMENTS: ClassVar[str] = "documents"
    CHUNKS: ClassVar[str] = "chunks"

    def _run(self, sql: str, args: Sequence[Any] = ()) -> Rows:
        """The rows of one statement (the store's own connection, lock and error mapping)."""
        raise NotImplementedError

    def _batches(self, sql: str, args: Sequence[Any], size: int) -> Iterator[Rows]:
        """The rows of one statement, ``size`` at a time."""
        rows = self._run(sql, args)
        for start in range(0, len(rows), size):
            yield rows[start : start + size]

    def _tables(self, sql: str) -> str:
        return sql.replace("{D}", self.DOCUMENTS).replace("{C}", self.CHUNKS)

    def _q(self, sql: str, args: Sequence[Any] = ()) -> Rows:
        return self._run(self._tables(sql), args)

    def _one(self, sql: str, args: Sequence[Any] = ()) -> Any:
        """The first column of the first row."""
        return self._q(sql, args)[0][0]

    # ---- documents ----------------------------------------------------------------------------

    def find_current(self, source: str) -> StoredDocument | None:
        """The current version of ``source``, or None."""
        return self.get_document(source)

    def get_document(self, source: str, version: int | None = None) -> StoredDocument | None:
        """A version of ``source`` (None: the current one), with its chunk count."""
        where, args = ("source = ? AND current = 1", [source]) if version is None else (
            "source = ? AND version = ?", [source, version])  # fmt: skip
        rows = self._q(
            f"SELECT {DOC_COLS}, (SELECT count(*) FROM {{C}} WHERE doc_id = d.id) FROM {{D}} d WHERE {where}", args
        )
        return doc_of(rows[0], int(rows[0][13])) if rows else None

    def versions(self, source: str) -> list[StoredDocument]:
        """Every stored version of ``source``, oldest first."""
        return [doc_of(r) for r in self._q(f"SELECT {DOC_COLS} FROM {{D}} WHERE source = ? ORDER BY version", [source])]

    def list_documents(self, filters: Filters = NO_FILTERS, offset: int = 0, limit: int = 50) -> list[StoredDocument]:
        """Documents passing ``filters`` (validity and expiry judged on the document), newest first."""
        where, args = filters.sql(time.time())
        where = where.replace("c.", "d.")  # documents carry the same columns
        rows = self._q(
            f"SELECT {', '.join('d.' + c for c in DOC_COLS.split(', '))}, "
            "(SELECT count(*) FROM {C} WHERE doc_id = d.id) "
            f"FROM {{D}} d WHERE {where} ORDER BY d.added_at DESC, d.id DESC LIMIT ? OFFSET ?",
            [*args, limit, offset],
        )
        return [doc_of(r, int(r[13])) for r in rows]

    # ---- chunks -------------------------------------------------------------------------------

    def document_chunks(self, doc_id: int, offset: int = 0, limit: int = 100) -> list[ChunkHit]:
        """A document's chunks in position order, ``limit`` from ``offset``."""
        rows = self._q(
            f"SELECT {HIT_COLS} {JOIN} WHERE c.doc_id = ? ORDER BY c.position LIMIT ? OFFSET ?", [doc_id, limit, offset]
        )
        return [hit_of(r, 0.0) for r in rows]

    def chunks_by_id(self, ids: Sequence[int], filters: Filters | None = None) -> list[ChunkHit]:
        """The chunks with these ids (those passing ``filters``, when given), in the order of ``ids``."""
        where, args = filters.sql(time.time()) if filters is not None else ("1 = 1", [])
        found = {h.chunk_id: h for h in self._filtered([(i, 0.0) for i in ids], where, args)}
        return [found[i] for i in ids if i in found]

    def chunks_with_vectors(
        self, doc_id: int, positions: Sequence[int] | None = None, filters: Filters | None = None
    ) -> list[tuple[ChunkHit, npt.NDArray[np.float32]]]:
        """A document's chunks (all, or those at ``positions``) with their vectors, in position order.

        With ``filters``, only chunks that pass them (judged in the query, like every retrieval).
        """
        where, args = filters.sql(time.time()) if filters is not None else ("1 = 1", [])
        if positions is not None:
            where += f" AND c.position IN ({marks(len(positions))})" if positions else " AND 1 = 0"
            args = [*args, *positions]
        rows = self._q(
            f"SELECT {HIT_COLS}, c.vector {JOIN} WHERE c.doc_id = ? AND c.vector IS NOT NULL AND {where} "
            "ORDER BY c.position",
            [doc_id, *args],
        )
        return [(hit_of(r[:9], 0.0), np.frombuffer(bytes(r[9]), dtype=np.float32)) for r in rows]

    def without_vectors(self, limit: int, after: int = 0) -> list[tuple[int, str]]:
        """(id, text) of up to ``limit`` chunks stored without a vector, ids above ``after``, in id order."""
        rows = self._q("SELECT id, text FROM {C} WHERE vector IS NULL AND id > ? ORDER BY id LIMIT ?", [after, limit])
        return [(int(r[0]), str(r[1])) for r in rows]

    def count_without_vectors(self) -> int:
        """Chunks stored without a vector (found by BM25 only, until ``set_vectors``)."""
        return int(self._one("SELECT count(*) FROM {C} WHERE vector IS NULL"))

    # ---- filtered retrieval -------------------------------------------------------------------

    def _filtered(self, scored: Sequence[tuple[int, float]], where: str, args: Sequence[Any]) -> list[ChunkHit]:
        """The chunks among ``scored`` (chunk id, score) that pass the filter ``where``, best first."""
        scores = dict(scored)
        kept: list[ChunkHit] = []
        for start in range(0, len(scored), _BATCH):
            part = [chunk_id for chunk_id, _ in scored[start : start + _BATCH]]
            rows = self._q(f"SELECT {HIT_COLS} {JOIN} WHERE c.id IN ({marks(len(part))}) AND {where}", [*part, *args])
            kept.extend(hit_of(r, scores[r[0]]) for r in rows)
        kept.sort(key=lambda h: (-h.score, h.chunk_id))
        return kept

    def _bm25_top(self, search: Callable[[int], Scored], k: int, filters: Filters) -> list[ChunkHit]:
        """The true filtered BM25 top ``k``: ``search(n)`` (the index's top ``n``) widened until ``k`` pass."""
        where, args = filters.sql(time.time())
        fetch = max(4 * k, 32)
        while True:
            found = search(fetch)
            kept = self._filtered(found, where, args)
            if len(kept) >= k or len(found) < fetch:  # enough, or every match was seen
                return kept[:k]
            fetch *= 4

    def _dense_top(
        self, search: Callable[[int], Scored], size: int, vector: Vectors, k: int, filters: Filters
    ) -> list[ChunkHit]:
        """Cosine top ``k`` passing ``filters``: ``search(n)`` over ``size`` vectors widened, then an exact scan."""
        if k <= 0 or size == 0:
            return []
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        where, args = filters.sql(time.time())
        fetch = min(size, max(4 * k, 32))
        while True:
            kept = self._filtered(search(fetch), where, args)
            if len(kept) >= k:
                return kept[:k]
            if fetch >= size:  # HNSW is approximate: near-duplicates can hide a few; scan the filtered rows
                return self._exact_dense(query, k, where, args)
            fetch = min(size, fetch * 4)

    def _exact_dense(self, query: npt.NDArray[np.float32], k: int, where: str, args: Sequence[Any]) -> list[ChunkHit]:
        scored: list[tuple[float, int]] = []
        sql = self._tables(f"SELECT c.id, c.vector {JOIN} WHERE c.vector IS NOT NULL AND {where}")
        for batch in self._batches(sql, args, 4096):
            sims = stacked([r[1] for r in batch]) @ query
            scored.extend(zip(sims.tolist(), (int(r[0]) for r in batch), strict=True))
            scored = sorted(scored, reverse=True)[:k]
        hits = {h.chunk_id: h for h in self._filtered([(i, s) for s, i in scored], "1 = 1", [])}
        return [hits[i] for _, i in scored if i in hits]


__all__ = [
    "BM25_ROWS",
    "DOC_COLS",
    "HIT_COLS",
    "JOIN",
    "RowReads",
    "Rows",
    "Scored",
    "checked",
    "doc_of",
    "hit_of",
    "insert_version",
    "marks",
    "stacked",
]
