"""The knowledge store: one SQLite database per state dir, tantivy for BM25, a usearch HNSW index for vectors.

``<state dir>/knowledge.db`` holds documents, their chunks (source, position, version, validity and
expiry, owner, metadata) and the chunks' vectors; user memory keeps its own tables in the same file
(:mod:`kairos.memory.store`). It is the source of truth; both indexes beside it are caches of its
rows, rebuilt when they do not match it.

BM25 is tantivy (``knowledge.tantivy/``, see :mod:`kairos.knowledge.bm25` for why and for its crash
safety): written inside the chunks' write transaction and stamped with the generation it matches.
Filters are applied inside retrieval: owner, sources, kind and excluded kinds are part of the tantivy
query; validity, expiry and "current version" (which change when a new version arrives) are checked
in SQL on an over-fetched top list, widened (×4 each round) until ``k`` hits pass or the matches run
out — BM25 is exact, so the result is the true filtered top ``k``.

Vectors are stored in the database too; the HNSW index (``knowledge.usearch`` beside it, see
:mod:`kairos.knowledge.vectors`) is a cache of them. A generation number, bumped in every write
transaction, is saved with the index: on open, an index that is missing, unreadable or of another
generation is rebuilt from the stored vectors. usearch's Python search takes no predicate, so dense
search over-fetches and filters the candidates in SQL, widening the fetch (×4 each round) until
``k`` hits pass; once the whole index was fetched and still fewer pass (a very selective filter), it
scores the filtered rows' stored vectors exactly.

:class:`KnowledgeStore` is the protocol both backends implement: this one, and
:class:`~kairos.knowledge.store_pg.PgKnowledgeStore` (rows in PostgreSQL, the same tantivy and usearch
indexes as per-process caches) that :func:`open_knowledge_store` picks for a ``postgresql://`` URL. The
reads and the widening loops are shared (:mod:`kairos.knowledge.rows`).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kairos.errors import KairosError, StoreError
from kairos.knowledge.bm25 import TantivyBM25
from kairos.knowledge.records import (
    NO_FILTERS,
    ChunkHit,
    ChunkIn,
    DocumentIn,
    Filters,
    KnowledgeStore,
    StoredDocument,
    fts_query,
)
from kairos.knowledge.rows import RowReads, Rows, Scored, checked, insert_version
from kairos.knowledge.stages import StageClock
from kairos.knowledge.vectors import HnswIndex, generation
from kairos.paths import ensure_state_dir
from kairos.retrieval.text import query_words
from kairos.storage import Migration, connect, migrate
from kairos.storage.config import chosen_store

if TYPE_CHECKING:
    from kairos.retrieval.embeddings import Vectors

__all__ = [
    "BM25_NAME",
    "DB_NAME",
    "INDEX_NAME",
    "NO_FILTERS",
    "ChunkHit",
    "ChunkIn",
    "DocumentIn",
    "Filters",
    "KnowledgeStore",
    "SQLiteKnowledgeStore",
    "StoreError",
    "StoredDocument",
    "fts_query",
    "open_knowledge_store",
]

DB_NAME = "knowledge.db"
INDEX_NAME = "knowledge.usearch"
BM25_NAME = "knowledge.tantivy"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY, source TEXT NOT NULL, version INTEGER NOT NULL, digest TEXT NOT NULL,
    kind TEXT NOT NULL, title TEXT NOT NULL DEFAULT '', owner TEXT, current INTEGER NOT NULL DEFAULT 1,
    added_at REAL NOT NULL, valid_from REAL, valid_to REAL, expires_at REAL, meta TEXT NOT NULL DEFAULT '{}',
    UNIQUE (source, version)
);
CREATE INDEX IF NOT EXISTS documents_current ON documents (source, current);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY, doc_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    source TEXT NOT NULL, version INTEGER NOT NULL, position INTEGER NOT NULL, text TEXT NOT NULL,
    owner TEXT, valid_from REAL, valid_to REAL, expires_at REAL, meta TEXT NOT NULL DEFAULT '{}', vector BLOB
);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks (doc_id, position);
CREATE INDEX IF NOT EXISTS chunks_source ON chunks (source);
CREATE INDEX IF NOT EXISTS chunks_without_vectors ON chunks (id) WHERE vector IS NULL;
"""
_PLACEHOLDER_MEMORIES = [
    "id", "owner", "kind", "content", "version", "supersedes", "importance", "created_at", "valid_from", "valid_to",
    "expires_at", "provenance", "meta",
]  # fmt: skip
"""The columns of the ``memories`` table this store created before :mod:`kairos.memory.store` had its own."""


def _drop_leftovers(db: sqlite3.Connection) -> None:
    """Version 2: drop the FTS5 index of before tantivy, and this store's unused ``memories`` placeholder.

    The placeholder goes only while it is empty and has exactly its old columns: the memory store
    keeps its own ``memories`` table in this file, which is never touched here.
    """
    db.execute("DROP TABLE IF EXISTS chunks_fts")
    columns = [row[1] for row in db.execute("PRAGMA table_info(memories)")]
    if columns == _PLACEHOLDER_MEMORIES and db.execute("SELECT count(*) FROM memories").fetchone()[0] == 0:
        db.execute("DROP TABLE memories")


MIGRATIONS: tuple[Migration, ...] = (_SCHEMA, _drop_leftovers)
"""The ``knowledge`` owner's versions in ``knowledge.db`` (kairos.storage.migrations)."""


class SQLiteKnowledgeStore(RowReads):
    """The embedded :class:`KnowledgeStore`: ``<state_dir>/knowledge.db`` plus ``knowledge.usearch`` and ``.tantivy``.

    Args:
        state_dir: the workspace's state dir (``kairos.paths.default_state_dir``).
        dim: vector length of the embedder in use.
        embedder_name: stored on first use; opening with another model raises :class:`StoreError`.
        show_progress: show a progress bar while an index is rebuilt.
    """

    def __init__(self, state_dir: Path, dim: int, embedder_name: str, *, show_progress: bool = False) -> None:
        ensure_state_dir(state_dir)
        self.state_dir = state_dir
        self.path = state_dir / DB_NAME
        self.index_path = state_dir / INDEX_NAME
        self.dim = dim
        self._lock = threading.RLock()
        self._show_progress = show_progress
        # every error about the file, now or in any later query, names it (kairos.storage)
        self._db = connect(self.path, "the knowledge database")
        self.clock = StageClock()
        """Seconds this store spent per ingest stage (rows, BM25 index, vector index, commit)."""
        try:
            migrate(self._db, "knowledge", MIGRATIONS)
            known = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        except KairosError:
            self._db.close()
            raise
        wanted = f"{embedder_name}:{dim}"
        if "embedder" not in known:
            self._db.execute("INSERT INTO meta VALUES ('embedder', ?), ('gen', '0')", (wanted,))
        elif known["embedder"] != wanted:
            self._db.close()
            raise StoreError(
                f"{self.path} was built with the embedder {known['embedder']}, not {wanted}; "
                "use that embedder, or remove the database to re-index with this one"
            )
        self._vectors = HnswIndex(self.index_path, dim, show_progress=show_progress)
        self._vectors.open(self._db)
        try:
            self._bm25 = TantivyBM25(state_dir / BM25_NAME)
        except (OSError, ValueError, RuntimeError) as e:
            self._db.close()
            raise StoreError(f"cannot open the full-text index {state_dir / BM25_NAME}: {e}") from e
        self._bm25_gen = -1  # the database generation the full-text index reflects
        self._sync_bm25()

    # ---- the full-text index ----------------------------------------------------------------

    def _sync_bm25(self) -> None:
        """Adopt the full-text index if it matches the database's generation, else rebuild it."""
        gen = self._gen()
        if gen == self._bm25_gen:
            return
        n = self._db.execute("SELECT count(*) FROM chunks").fetchone()[0]
        if self._bm25.matches(gen, n):
            self._bm25_gen = gen
        else:
            self.rebuild_bm25()

    def rebuild_bm25(self, *, force: bool = False) -> None:
        """Rebuild the full-text index from the chunk rows unless it matches them (``force``: always)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")  # writers wait: the rows and the generation stay put
            try:
                gen = self._gen()
                n = self._db.execute("SELECT count(*) FROM chunks").fetchone()[0]
                if force or not self._bm25.matches(gen, n):  # another process may have fixed it meanwhile
                    self._write_bm25(gen, rebuild=True)
            finally:
                self._db.execute("COMMIT")
            self._bm25_gen = gen

    def _write_bm25(self, gen: int, add: Sequence[int] = (), delete: Sequence[int] = (), rebuild: bool = False) -> None:
        """Inside a write transaction: bring the full-text index to generation ``gen`` (see ``TantivyBM25.write``)."""
        self._bm25.write(self._db, gen, add, delete, rebuild=rebuild, show_progress=self._show_progress)

    # ---- the vector index -------------------------------------------------------------------

    def _gen(self) -> int:
        return generation(self._db)

    def _bump(self) -> int:
        """Inside a write transaction: the generation before it, bumped by one."""
        before = self._gen()
        self._db.execute("UPDATE meta SET value = ? WHERE key = 'gen'", (str(before + 1),))
        return before

    def rebuild_index(self) -> None:
        """Rebuild the HNSW index from the vectors in the database (a progress bar when asked for)."""
        with self._lock:
            self._vectors.rebuild(self._db)

    def flush(self) -> None:
        """Save the vector index (with the database generation it matches) if it changed."""
        with self._lock, self.clock.stage("vectors"):
            self._vectors.flush()

    # ---- writes -----------------------------------------------------------------------------

    def add_document(
        self, doc: DocumentIn, chunks: Iterable[tuple[ChunkIn, npt.ArrayLike | None]]
    ) -> tuple[StoredDocument, StoredDocument | None]:
        """Store ``doc`` as the next version of its source, all in one transaction.

        A chunk given no vector is stored without one: BM25 finds it at once, dense search once
        :meth:`set_vectors` gives it one (``kb add`` stores every file first, then embeds). An unchanged
        document (same digest as the current version) is not stored again: the current version comes
        back with ``replaced`` None. Chunks are consumed inside the transaction; if anything fails (or
        the process dies) nothing of this document is visible afterwards.
        """
        with self._lock:
            previous = self.find_current(doc.source)
            if previous is not None and previous.digest == doc.digest:
                return previous, None
            db, clock = self._db, self.clock
            db.execute("BEGIN IMMEDIATE")
            try:
                previous = self.find_current(doc.source)  # another process may have added a version meanwhile
                if previous is not None and previous.digest == doc.digest:
                    db.execute("COMMIT")
                    return previous, None
                with clock.stage("rows"):
                    version, new_keys, new_vecs = self._insert_rows(doc, chunks, previous)
                    before = self._bump()
                self._bm25_gen = -1  # until the commit: the full-text index may be ahead of the table
                with clock.stage("bm25"):
                    self._write_bm25(before + 1, add=new_keys)
                with clock.stage("commit"):
                    db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._bm25_gen = before + 1
            with clock.stage("vectors"):
                self._vectors.committed(db, before, add=list(new_vecs), vectors=list(new_vecs.values()))
            stored = self.get_document(doc.source, version)
            assert stored is not None
            return stored, previous

    def _insert_rows(
        self, doc: DocumentIn, chunks: Iterable[tuple[ChunkIn, npt.ArrayLike | None]], previous: StoredDocument | None
    ) -> tuple[int, list[int], dict[int, npt.NDArray[np.float32]]]:
        """Inside the write transaction: close ``previous``, insert the document and its chunks.

        Returns the new version, the chunk ids, and the vectors of those that have one.
        """
        db = self._db
        return insert_version(
            lambda sql, args: db.execute(self._tables(sql), args).fetchall(),
            lambda sql, args: int(db.execute(self._tables(sql), args).lastrowid or 0),
            doc, chunks, previous, self.dim,
        )  # fmt: skip

    def set_vectors(self, vectors: Sequence[tuple[int, npt.ArrayLike]]) -> int:
        """Give chunks stored without a vector their vectors (one transaction); returns how many were set.

        A chunk removed meanwhile, or given a vector already, is skipped.
        """
        given = [(key, checked(vector, self.dim)) for key, vector in vectors]
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                with self.clock.stage("rows"):
                    keys, vecs = [], []
                    for key, vec in given:
                        cur = db.execute("UPDATE chunks SET vector = ? WHERE id = ? AND vector IS NULL",
                                         (vec.tobytes(), key))  # fmt: skip
                        if cur.rowcount:
                            keys.append(key)
                            vecs.append(vec)
                    before = self._bump()
                bm25_current = self._bm25.stamped_gen() == before
                if bm25_current:  # the text did not change: its index is the new generation's too (a stale
                    self._bm25.mark(before + 1)  # stamp, should the commit fail, costs a rebuild, never a wrong hit)
                with self.clock.stage("commit"):
                    db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            if bm25_current:
                self._bm25_gen = before + 1
            with self.clock.stage("vectors"):
                self._vectors.committed(db, before, add=keys, vectors=vecs)
            return len(keys)

    def remove_source(self, source: str) -> int:
        """Delete every version of ``source`` (rows, full-text entries and vectors); returns the documents removed."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                ids = [r[0] for r in db.execute("SELECT id FROM chunks WHERE source = ?", (source,))]
                db.execute("DELETE FROM chunks WHERE source = ?", (source,))
                n = db.execute("DELETE FROM documents WHERE source = ?", (source,)).rowcount
                before = self._bump()
                self._bm25_gen = -1
                self._write_bm25(before + 1, delete=ids)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._bm25_gen = before + 1
            self._vectors.committed(db, before, remove=ids)
            return int(n)

    def ensure(self, owner: str, migrations: Sequence[Migration]) -> None:
        """Bring another owner's tables in this database (the graph's) to their version (kairos.storage).

        Raises:
            SchemaTooNewError: a newer kairos migrated them.
        """
        with self._lock:
            migrate(self._db, owner, migrations)

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction on the database (auxiliary indexes beside the chunks): all of it or nothing."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """The connection, held under the store's lock (reads of auxiliary tables)."""
        with self._lock:
            yield self._db

    # ---- reads (kairos.knowledge.rows) ---------------------------------------------------------

    def _run(self, sql: str, args: Sequence[Any] = ()) -> Rows:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def _batches(self, sql: str, args: Sequence[Any], size: int) -> Iterator[Rows]:
        with self._lock:
            cursor = self._db.execute(sql, args)
            while batch := cursor.fetchmany(size):
                yield batch

    def search_bm25(self, query: str, k: int, filters: Filters = NO_FILTERS) -> list[ChunkHit]:
        """BM25 top ``k`` among the chunks that pass ``filters`` (see the module docstring for how)."""
        with self._lock:  # tantivy's analyzer is not shared across threads
            terms = self._bm25.terms(query_words(query))
            if not terms or k <= 0:
                return []
            self._sync_bm25()
            f = filters
            search = self._bm25.query(terms, f.owner, f.sources, f.kind, f.exclude_kinds)

            def top(n: int) -> Scored:
                try:
                    return self._bm25.search(search, n)
                except ValueError:  # index files damaged since they were opened: rebuild from the rows, once
                    self.rebuild_bm25(force=True)
                    return self._bm25.search(search, n)

            return self._bm25_top(top, k, filters)

    def search_dense(self, vector: Vectors, k: int, filters: Filters = NO_FILTERS) -> list[ChunkHit]:
        """Cosine top ``k`` among chunks passing ``filters``: over-fetch from HNSW, filter in SQL, widen until full."""
        with self._lock:
            self._vectors.refresh(self._db)
            query = np.asarray(vector, dtype=np.float32).reshape(-1)
            return self._dense_top(lambda n: self._vectors.search(query, n), len(self._vectors), query, k, filters)

    def stats(self) -> dict[str, Any]:
        """Documents (current, by kind, all versions), chunks, vectors (and chunks without one), sources, file sizes."""
        with self._lock:
            self._vectors.refresh(self._db)
            # the memory store's table, in this file once user memory was used
            memories = self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'memories'")
            counted = "(SELECT count(*) FROM memories)" if memories.fetchone() else "0"
            one = self._db.execute(
                "SELECT (SELECT count(*) FROM documents WHERE current = 1), (SELECT count(*) FROM documents),"
                " (SELECT count(DISTINCT source) FROM documents), (SELECT count(*) FROM chunks),"
                f" {counted}, (SELECT count(*) FROM chunks WHERE vector IS NULL)"
            ).fetchone()
            kinds = self._db.execute(
                "SELECT kind, count(*) FROM documents WHERE current = 1 GROUP BY kind ORDER BY kind"
            )
            return {
                "documents": one[0],
                "kinds": dict(kinds.fetchall()),
                "document_versions": one[1],
                "sources": one[2],
                "chunks": one[3],
                "vectors": len(self._vectors),
                "chunks_without_vectors": one[5],
                "memories": one[4],
                "db_bytes": self.path.stat().st_size if self.path.exists() else 0,
                "index_bytes": self._vectors.size_bytes(),
                "bm25_bytes": self._bm25.size_bytes(),
            }

    def check(self) -> dict[str, int]:
        """Row counts that must agree (chunks, full-text documents, vectors) — for tests and ``kb stats``."""
        with self._lock:
            self._vectors.refresh(self._db)
            self._sync_bm25()
            chunks = self._db.execute("SELECT count(*) FROM chunks").fetchone()[0]
            fts = self._bm25.num_docs()
            orphans = self._db.execute(
                "SELECT count(*) FROM chunks c LEFT JOIN documents d ON d.id = c.doc_id WHERE d.id IS NULL"
            ).fetchone()[0]
            return {"chunks": chunks, "bm25_docs": fts, "vectors": len(self._vectors), "orphan_chunks": orphans}

    def close(self) -> None:
        """Save the index and close the database."""
        with self._lock:
            try:
                self.flush()
            finally:
                self._db.close()

    def __enter__(self) -> SQLiteKnowledgeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_knowledge_store(
    state_dir: Path, dim: int, embedder_name: str, url: str = "embedded", *, show_progress: bool = False
) -> KnowledgeStore:
    """The knowledge store ``url`` (``[storage] store``) names: ``knowledge.db`` in ``state_dir``, or PostgreSQL.

    With PostgreSQL every worker of a deployment shares one knowledge base
    (:class:`~kairos.knowledge.store_pg.PgKnowledgeStore`; its indexes are cached under ``state_dir``).

    Raises:
        ConfigError: ``url`` names no store (shown with its password masked).
        StoreError: the store cannot be used.
    """
    kind = chosen_store(url)
    if kind == "postgresql":
        from kairos.knowledge.store_pg import PgKnowledgeStore

        return PgKnowledgeStore(url, state_dir, dim, embedder_name, show_progress=show_progress)
    return SQLiteKnowledgeStore(state_dir, dim, embedder_name, show_progress=show_progress)
