"""The PostgreSQL :class:`~kairos.knowledge.records.KnowledgeStore`: one knowledge base for a whole deployment.

The same rows and promises as :class:`~kairos.knowledge.store.SQLiteKnowledgeStore`, in tables of
their own (``kb_documents``, ``kb_chunks``: the names ``documents`` and ``chunks`` may be another
component's), with every read shared with it (:mod:`kairos.knowledge.rows`):

- Vectors are ``bytea`` in ``kb_chunks``; ``meta`` is JSON text, as on SQLite.
- Lexical search is the embedded tantivy index and dense search the usearch HNSW index, beside the
  rows — not ``tsvector`` or pgvector (README "Scaling out", docs/scaling-lexical.md). They are
  per-process caches in ``<state dir>/knowledge-pg-cache/<key>/``, caught up before each search
  from a generation number and a change log kept in the database (:mod:`kairos.knowledge.pg_cache`);
  the key names the database (its URL without the password, and an id drawn when its tables were
  created), so a database re-created under the same URL never adopts a stale cache.
- Each write is one transaction that first locks the generation row: writers of the whole
  deployment take turns (as on SQLite, where ``BEGIN IMMEDIATE`` does it), generations commit in
  order, and two workers adding the same source never make one version twice or two current ones
  (the second sees the first's version; ``UNIQUE (source, version)`` and a unique index on the
  current version of a source back that up).
- The change log keeps the last ``keep_changes`` generations; a cache older than that is rebuilt
  from the rows.
- The entity graph (:mod:`kairos.knowledge.entity_graph`) keeps its tables beside ``kb_chunks``
  (deleted with them), migrated per owner in ``schema_versions`` by :meth:`PgKnowledgeStore.ensure`;
  :meth:`~PgKnowledgeStore.read` (one read-only snapshot) and :meth:`~PgKnowledgeStore.write` (one
  read-committed transaction) hand it a :class:`PgTables`, which runs the graph's ``?`` statements
  through :func:`~kairos.storage.pg_sql.pg_sql` — the same statements as on SQLite.
- The embedder is recorded on first use; a process with another embedder is refused.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt

from kairos.errors import StoreError
from kairos.knowledge.pg_cache import PgIndexCache, Query
from kairos.knowledge.records import (
    NO_FILTERS,
    ChunkHit,
    ChunkIn,
    Cursor,
    DocumentIn,
    Filters,
    StoredDocument,
)
from kairos.knowledge.rows import DOC_COLS, RowReads, Rows, Scored, checked, doc_of, insert_version
from kairos.knowledge.stages import StageClock
from kairos.paths import ensure_state_dir
from kairos.retrieval.text import query_words
from kairos.storage.pg_sql import pg_ddl, pg_sql
from kairos.storage.postgres import PgDatabase, fault

if TYPE_CHECKING:
    from kairos.retrieval.embeddings import Vectors

T = TypeVar("T")
WHAT = "the knowledge database"
CACHE_DIR = "knowledge-pg-cache"
KEEP_CHANGES = 10_000
"""Generations of the change log kept: a cache further behind is rebuilt from the rows."""
_SCHEMA = """
CREATE TABLE IF NOT EXISTS kb_settings (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS kb_generation (
    one INTEGER PRIMARY KEY CHECK (one = 1), gen BIGINT NOT NULL, trimmed BIGINT NOT NULL
);
INSERT INTO kb_generation (one, gen, trimmed) VALUES (1, 0, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS kb_documents (
    id BIGSERIAL PRIMARY KEY, source TEXT NOT NULL, version INTEGER NOT NULL, digest TEXT NOT NULL,
    kind TEXT NOT NULL, title TEXT NOT NULL DEFAULT '', owner TEXT, current INTEGER NOT NULL DEFAULT 1,
    added_at DOUBLE PRECISION NOT NULL, valid_from DOUBLE PRECISION, valid_to DOUBLE PRECISION,
    expires_at DOUBLE PRECISION, meta TEXT NOT NULL DEFAULT '{}',
    UNIQUE (source, version)
);
CREATE UNIQUE INDEX IF NOT EXISTS kb_documents_current ON kb_documents (source) WHERE current = 1;
CREATE TABLE IF NOT EXISTS kb_chunks (
    id BIGSERIAL PRIMARY KEY, doc_id BIGINT NOT NULL REFERENCES kb_documents(id) ON DELETE CASCADE,
    source TEXT NOT NULL, version INTEGER NOT NULL, position INTEGER NOT NULL, text TEXT NOT NULL,
    owner TEXT, valid_from DOUBLE PRECISION, valid_to DOUBLE PRECISION, expires_at DOUBLE PRECISION,
    meta TEXT NOT NULL DEFAULT '{}', vector BYTEA
);
CREATE INDEX IF NOT EXISTS kb_chunks_doc ON kb_chunks (doc_id, position);
CREATE INDEX IF NOT EXISTS kb_chunks_source ON kb_chunks (source);
CREATE INDEX IF NOT EXISTS kb_chunks_without_vectors ON kb_chunks (id) WHERE vector IS NULL;
CREATE TABLE IF NOT EXISTS kb_changes (gen BIGINT NOT NULL, op TEXT NOT NULL, chunk_id BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS kb_changes_gen ON kb_changes (gen);
"""
MIGRATIONS: tuple[str, ...] = (_SCHEMA,)
"""The ``knowledge`` owner's versions in a PostgreSQL database (kairos.storage.postgres)."""


def _fetch(cursor: Any) -> Rows:
    return list(cursor.fetchall()) if cursor.description is not None else []


class PgTables:
    """Other owners' tables beside the chunks (the entity graph's) on one connection: ``?`` statements.

    The :class:`~kairos.knowledge.records.SideTables` of :meth:`PgKnowledgeStore.read` and
    :meth:`PgKnowledgeStore.write`; statements go through :func:`pg_sql`, inside the caller's transaction.
    """

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Cursor:
        """Run one statement; its cursor (fetch from it only when the statement returns rows)."""
        cursor: Cursor = self._conn.execute(pg_sql(sql), list(parameters))
        return cursor

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> None:
        """Run one statement over many rows (pipelined)."""
        rows = [list(p) for p in parameters]
        if rows:
            with self._conn.cursor() as cursor:
                cursor.executemany(pg_sql(sql), rows)


class PgKnowledgeStore(RowReads):
    """Documents, chunks and vectors in PostgreSQL (``postgresql://USER:PASSWORD@HOST:PORT/DB``); see the module.

    Args:
        url: the database (``[storage] store``).
        state_dir: where this process caches the indexes (``knowledge-pg-cache/`` in it).
        dim: vector length of the embedder in use.
        embedder_name: recorded on first use; another one is refused.
        show_progress: a progress bar while an index is rebuilt.
        keep_changes: generations of the change log kept.

    Raises:
        StoreError: psycopg is missing, the server cannot be reached (the URL's password masked), or
            the database holds a knowledge base of another embedder.
    """

    DOCUMENTS = "kb_documents"
    CHUNKS = "kb_chunks"

    def __init__(
        self, url: str, state_dir: Path, dim: int, embedder_name: str, *, show_progress: bool = False,
        keep_changes: int = KEEP_CHANGES, max_connections: int = 4,
    ) -> None:  # fmt: skip
        self.url, self.dim, self.state_dir = url, dim, state_dir
        self.keep_changes = max(1, keep_changes)
        self._db = PgDatabase(url, WHAT, max_size=max_connections)  # first: a missing psycopg gets the install hint
        import psycopg

        self._psycopg = psycopg
        self.path = self._db.shown
        """Where it is, as errors name it (the URL without its password)."""
        self.clock = StageClock()
        """Seconds this store spent per ingest stage (rows, commit)."""
        self._lock = threading.RLock()
        self._ensured: set[str] = set()
        try:
            self._db.migrate("knowledge", MIGRATIONS)
            instance = self._settings(f"{embedder_name}:{dim}")
            ensure_state_dir(state_dir)
            folder = state_dir / CACHE_DIR / hashlib.sha256(f"{self.path}\n{instance}".encode()).hexdigest()[:16]
            try:
                self.cache = PgIndexCache(folder, dim, show_progress=show_progress)
            except (OSError, ValueError, RuntimeError) as e:
                raise StoreError(f"cannot use the index cache {folder} of {WHAT} at {self.path}: {e}") from e
        except BaseException:
            self._db.close()
            raise

    def _settings(self, wanted: str) -> str:
        """Record the embedder (or refuse another); the id of this database's knowledge tables."""

        def go(conn: Any) -> dict[str, str]:
            for name, value in (("embedder", wanted), ("instance", uuid.uuid4().hex)):
                conn.execute("INSERT INTO kb_settings (name, value) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                             (name, value))  # fmt: skip
            return {str(r[0]): str(r[1]) for r in conn.execute("SELECT name, value FROM kb_settings")}

        found = self._write(go)
        if found["embedder"] != wanted:
            raise StoreError(
                f"{WHAT} at {self.path} was built with the embedder {found['embedder']}, not {wanted}: every "
                "process of a deployment needs the same [knowledge] embedder (or drop the kb_* tables to re-index)"
            )
        return found["instance"]

    # ---- plumbing -----------------------------------------------------------------------------

    @contextmanager
    def _faults(self) -> Iterator[None]:
        """Map the driver's errors to the StoreError tree (a lost race on a version: a plain StoreError)."""
        try:
            yield
        except self._psycopg.IntegrityError as e:
            raise StoreError(f"{WHAT} at {self.path} refused a write another process made first: {e}") from e
        except self._psycopg.Error as e:
            raise fault(e, self.url, WHAT) from e

    def _run(self, sql: str, args: Sequence[Any] = ()) -> Rows:
        with self._faults(), self._db.connection() as conn:
            return _fetch(conn.execute(pg_sql(sql), list(args)))

    def _on(self, conn: Any) -> Callable[[str, Sequence[Any]], Rows]:
        """Run ``?`` statements over ``{D}``/``{C}`` on ``conn`` (inside its transaction)."""

        def run(sql: str, args: Sequence[Any] = ()) -> Rows:
            return _fetch(conn.execute(pg_sql(self._tables(sql)), list(args)))

        return run

    def _write(self, fn: Callable[[Any], T]) -> T:
        """``fn(conn)`` inside one transaction."""
        with self._faults(), self._db.transaction() as conn:
            return fn(conn)

    @contextmanager
    def _snapshot(self) -> Iterator[Query]:
        """One read-only repeatable-read transaction: the generation, the change log and the rows agree."""
        with self._faults(), self._db.connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield self._on(conn)

    @staticmethod
    def _turn(conn: Any) -> None:
        """Wait for this deployment's other writers: lock the generation row until the transaction ends."""
        conn.execute("SELECT gen FROM kb_generation WHERE one = 1 FOR UPDATE")

    def _bump(self, conn: Any, op: str, ids: Sequence[int]) -> int:
        """Inside a write transaction (its turn taken): the next generation, with ``ids`` logged under ``op``."""
        gen = int(conn.execute("UPDATE kb_generation SET gen = gen + 1 WHERE one = 1 RETURNING gen").fetchone()[0])
        if ids:
            conn.execute("INSERT INTO kb_changes (gen, op, chunk_id) SELECT %s, %s, unnest(%s::bigint[])",
                         (gen, op, list(ids)))  # fmt: skip
        if gen > self.keep_changes:
            conn.execute("DELETE FROM kb_changes WHERE gen <= %s", (gen - self.keep_changes,))
            conn.execute("UPDATE kb_generation SET trimmed = greatest(trimmed, %s) WHERE one = 1",
                         (gen - self.keep_changes,))  # fmt: skip
        return gen

    def _head(self) -> int:
        return int(self._run("SELECT gen FROM kb_generation WHERE one = 1")[0][0])

    def _sync(self, *, bm25: bool = False, vectors: bool = False) -> None:
        """Catch the local indexes up with the database (under the lock); ``bm25``/``vectors``: rebuild that one."""
        if bm25 or vectors or not self.cache.current(self._head()):
            self.cache.sync(self._snapshot, force_bm25=bm25, force_vectors=vectors)

    # ---- writes -------------------------------------------------------------------------------

    def add_document(
        self, doc: DocumentIn, chunks: Iterable[tuple[ChunkIn, npt.ArrayLike | None]]
    ) -> tuple[StoredDocument, StoredDocument | None]:
        """Store ``doc`` as the next version of its source, all in one transaction (see the SQLite store).

        An unchanged document (same digest as the current version) is not stored again: the current
        version comes back with ``replaced`` None.
        """
        previous = self.find_current(doc.source)
        if previous is not None and previous.digest == doc.digest:
            return previous, None

        def go(conn: Any) -> tuple[int, StoredDocument | None]:
            self._turn(conn)
            run = self._on(conn)
            rows = run(f"SELECT {DOC_COLS} FROM {{D}} WHERE source = ? AND current = 1", [doc.source])
            before = doc_of(rows[0]) if rows else None  # another worker may have added it meanwhile
            if before is not None and before.digest == doc.digest:
                return before.version, before
            with self.clock.stage("rows"):
                version, keys, _ = insert_version(
                    run, lambda sql, args: int(run(sql + " RETURNING id", args)[0][0]), doc, chunks, before, self.dim
                )
                self._bump(conn, "add", keys)
            return version, before

        with self.clock.stage("commit"):
            version, replaced = self._write(go)
        stored = self.get_document(doc.source, version)
        assert stored is not None
        if replaced is not None and replaced.version == version:  # unchanged after all
            return stored, None
        return stored, replaced

    def set_vectors(self, vectors: Sequence[tuple[int, npt.ArrayLike]]) -> int:
        """Give chunks stored without a vector their vectors (one transaction); returns how many were set.

        A chunk removed meanwhile, or given a vector already, is skipped.
        """
        given = [(int(key), checked(vector, self.dim).tobytes()) for key, vector in vectors]
        if not given:
            return 0

        def go(conn: Any) -> int:
            self._turn(conn)
            with self.clock.stage("rows"):
                rows = conn.execute(
                    "UPDATE kb_chunks c SET vector = v.vec FROM unnest(%s::bigint[], %s::bytea[]) AS v(id, vec) "
                    "WHERE c.id = v.id AND c.vector IS NULL RETURNING c.id",
                    ([k for k, _ in given], [v for _, v in given]),
                ).fetchall()
                if rows:
                    self._bump(conn, "vector", [int(r[0]) for r in rows])
            return len(rows)

        return self._write(go)

    def remove_source(self, source: str) -> int:
        """Delete every version of ``source`` (rows, and from every cache); returns the documents removed."""

        def go(conn: Any) -> int:
            self._turn(conn)
            ids = [int(r[0]) for r in conn.execute("DELETE FROM kb_chunks WHERE source = %s RETURNING id", (source,))]
            n = int(conn.execute("DELETE FROM kb_documents WHERE source = %s", (source,)).rowcount)
            if n or ids:
                self._bump(conn, "delete", ids)
            return n

        return self._write(go)

    def flush(self) -> None:
        """Save this process's vector index (with the generation it matches) if it changed."""
        with self._lock, self.clock.stage("vectors"):
            self.cache.flush()

    def rebuild_index(self) -> None:
        """Rebuild the vector index from the vectors in the database."""
        with self._lock:
            self._sync(vectors=True)

    def rebuild_bm25(self, *, force: bool = False) -> None:
        """Rebuild the full-text index from the chunk rows unless it matches them (``force``: always)."""
        with self._lock:
            self._sync(bm25=force)

    # ---- other owners' tables beside the chunks (the entity graph's) ------------------------

    def ensure(self, owner: str, migrations: Sequence[Any]) -> None:
        """Bring ``owner``'s tables to version ``len(migrations)`` (once per process; :func:`pg_ddl` applied).

        Raises:
            SchemaTooNewError: a newer kairos migrated them; nothing was written.
            TypeError: a migration is Python code for SQLite (these must be SQL).
        """
        with self._lock:
            if owner in self._ensured:
                return
            scripts = []
            for n, step in enumerate(migrations, 1):
                if not isinstance(step, str):
                    raise TypeError(f"migration {n} of {owner!r} is Python for SQLite; PostgreSQL needs SQL")
                scripts.append(pg_ddl(step))
            with self._faults():
                self._db.migrate(owner, scripts)
            self._ensured.add(owner)

    @contextmanager
    def read(self) -> Iterator[PgTables]:
        """Those tables (and the chunks) in one read-only snapshot."""
        with self._faults(), self._db.connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield PgTables(conn)

    @contextmanager
    def write(self) -> Iterator[PgTables]:
        """One read-committed transaction on those tables: committed when the block ends, else rolled back.

        Read committed, so that a statement that waited for another worker's insert (``ON CONFLICT DO
        NOTHING`` on a name it inserted too) and the next statement see that worker's row once committed.
        """
        with self._faults(), self._db.transaction() as conn:
            yield PgTables(conn)

    # ---- retrieval ----------------------------------------------------------------------------

    def search_bm25(self, query: str, k: int, filters: Filters = NO_FILTERS) -> list[ChunkHit]:
        """BM25 top ``k`` among the chunks that pass ``filters`` (the local index, caught up first)."""
        with self._lock:  # tantivy's analyzer is not shared across threads
            bm25 = self.cache.bm25
            terms = bm25.terms(query_words(query))
            if not terms or k <= 0:
                return []
            self._sync()
            f = filters
            search = self.cache.bm25.query(terms, f.owner, f.sources, f.kind, f.exclude_kinds)

            def top(n: int) -> Scored:
                try:
                    return self.cache.bm25.search(search, n)
                except ValueError:  # index files damaged since they were opened: rebuild from the rows, once
                    self._sync(bm25=True)
                    return self.cache.bm25.search(search, n)

            return self._bm25_top(top, k, filters)

    def search_dense(self, vector: Vectors, k: int, filters: Filters = NO_FILTERS) -> list[ChunkHit]:
        """Cosine top ``k`` among chunks passing ``filters`` (the local HNSW index, caught up first)."""
        with self._lock:
            self._sync()
            index = self.cache.vectors
            query = np.asarray(vector, dtype=np.float32).reshape(-1)
            return self._dense_top(lambda n: index.search(query, n), len(index), query, k, filters)

    # ---- diagnostics --------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Documents (current, by kind, all versions), chunks, vectors (and chunks without one), sources, sizes."""
        with self._lock:
            self._sync()
            one = self._run(
                "SELECT (SELECT count(*) FROM kb_documents WHERE current = 1), (SELECT count(*) FROM kb_documents),"
                " (SELECT count(DISTINCT source) FROM kb_documents), (SELECT count(*) FROM kb_chunks),"
                " (SELECT count(*) FROM kb_chunks WHERE vector IS NULL), pg_total_relation_size('kb_documents')"
                " + pg_total_relation_size('kb_chunks') + pg_total_relation_size('kb_changes'),"
                " to_regclass('user_memories') IS NOT NULL"
            )[0]
            memories = self._run("SELECT count(*) FROM user_memories")[0][0] if one[6] else 0
            kinds = self._run("SELECT kind, count(*) FROM kb_documents WHERE current = 1 GROUP BY kind ORDER BY kind")
            return {
                "documents": one[0],
                "kinds": {str(k): int(n) for k, n in kinds},
                "document_versions": one[1],
                "sources": one[2],
                "chunks": one[3],
                "vectors": len(self.cache.vectors),
                "chunks_without_vectors": one[4],
                "memories": memories,
                "db_bytes": int(one[5]),
                "index_bytes": self.cache.vectors.size_bytes(),
                "bm25_bytes": self.cache.bm25.size_bytes(),
            }

    def check(self) -> dict[str, int]:
        """Row counts that must agree (chunks, full-text documents, vectors) — for tests and ``kb stats``."""
        with self._lock:
            self._sync()
            chunks, orphans = self._run(
                "SELECT count(*), count(*) FILTER (WHERE d.id IS NULL) FROM kb_chunks c "
                "LEFT JOIN kb_documents d ON d.id = c.doc_id"
            )[0]
            return {"chunks": int(chunks), "bm25_docs": self.cache.bm25.num_docs(),
                    "vectors": len(self.cache.vectors), "orphan_chunks": int(orphans)}  # fmt: skip

    def close(self) -> None:
        """Save the vector index and close the pool (idempotent)."""
        with self._lock:
            try:
                self.flush()
            finally:
                self._db.close()

    def __enter__(self) -> PgKnowledgeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["CACHE_DIR", "KEEP_CHANGES", "MIGRATIONS", "PgKnowledgeStore", "PgTables"]
