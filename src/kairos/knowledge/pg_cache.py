"""The indexes of a PostgreSQL knowledge base: tantivy and usearch in a local folder, caught up from a change log.

The rows live in PostgreSQL (:mod:`kairos.knowledge.store_pg`); each process keeps the same two
indexes the embedded store has — BM25 in tantivy (:mod:`kairos.knowledge.bm25`), vectors in a usearch
HNSW (:mod:`kairos.knowledge.vectors`) — in ``<state dir>/knowledge-pg-cache/<key>/``, as caches.

Every write transaction bumps the database's generation (``kb_generation``, one row: writers take
turns on it, so generations commit in order) and logs what it changed in ``kb_changes`` (``add``: a
chunk written, ``vector``: a chunk given its vector, ``delete``: a chunk removed), stamped with that
generation. Before a search, :meth:`PgIndexCache.sync` compares the generation its indexes reflect
with the database's; when behind, it reads — in one repeatable-read snapshot — the changes since its
stamp and the rows they name, and applies only those. A cache that is missing, unreadable, of an
unknown generation, or older than the oldest change still logged (the log is trimmed) is rebuilt
from the rows. Chunk ids are never reused, so "added, then deleted" within a catch-up simply finds
no row to add.

Processes on one machine share the folder: the tantivy index on disk (whoever is behind brings it
forward; the others adopt it), the saved usearch index (each process holds its own copy in memory,
restored from the file and caught up from the log). Every change to the folder is made under an
exclusive ``flock`` on ``lock`` in it.
"""

from __future__ import annotations

import fcntl
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from kairos.knowledge.bm25 import TantivyBM25
from kairos.knowledge.rows import BM25_ROWS, Rows, marks, stacked
from kairos.knowledge.vectors import HnswIndex

Query = Callable[[str, Sequence[Any]], Rows]
"""Runs one statement (``?`` placeholders, ``{C}``/``{D}`` for the chunk and document tables) in a snapshot."""
Snapshot = Callable[[], AbstractContextManager[Query]]
"""Opens a read-only repeatable-read snapshot of the database."""
_BATCH = 2048


def _changes(q: Query, after: int) -> tuple[list[int], list[int], list[int]]:
    """Chunk ids added, given a vector, and deleted since generation ``after``."""
    added: list[int] = []
    vectored: list[int] = []
    deleted: list[int] = []
    lists = {"add": added, "vector": vectored, "delete": deleted}
    for op, chunk_id in q("SELECT op, chunk_id FROM kb_changes WHERE gen > ? ORDER BY gen", [after]):
        lists[str(op)].append(int(chunk_id))
    return added, vectored, deleted


def _in(q: Query, sql: str, ids: Sequence[int]) -> Rows:
    """``sql`` (ending in ``WHERE``) for the rows whose chunk id is among ``ids``, in batches."""
    rows: Rows = []
    for start in range(0, len(ids), _BATCH):
        part = list(ids[start : start + _BATCH])
        rows.extend(q(f"{sql} c.id IN ({marks(len(part))})", part))
    return rows


class PgIndexCache:
    """BM25 and vector indexes in ``folder``, stamped with the generation of the database they reflect.

    The caller holds its own thread lock around every call (tantivy's analyzer is not shared across threads).
    """

    def __init__(self, folder: Path, dim: int, *, show_progress: bool = False) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.show_progress = show_progress
        with self._flock():
            self.bm25 = TantivyBM25(folder / "bm25")
        self.vectors = HnswIndex(folder / "vectors.usearch", dim, show_progress=show_progress)
        self.bm25_gen = -1
        """The generation the tantivy searcher of this process reflects (-1: not known yet)."""

    @contextmanager
    def _flock(self) -> Iterator[None]:
        """Exclusive use of the folder among the processes of this machine."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with (self.folder / "lock").open("a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def current(self, gen: int) -> bool:
        """Whether both indexes reflect generation ``gen``."""
        return self.bm25_gen == gen and self.vectors.gen == gen

    def sync(self, snapshot: Snapshot, *, force_bm25: bool = False, force_vectors: bool = False) -> int:
        """Bring both indexes to the database's generation (rebuilding those forced); returns it."""
        with self._flock(), snapshot() as q:
            gen, trimmed = (int(v) for v in q("SELECT gen, trimmed FROM kb_generation", [])[0])
            if force_vectors or self.vectors.gen != gen:
                self._sync_vectors(q, gen, trimmed, force_vectors)
            if force_bm25 or self.bm25_gen != gen:
                self._sync_bm25(q, gen, trimmed, force_bm25)
        return gen

    # ---- BM25 ---------------------------------------------------------------------------------

    def _sync_bm25(self, q: Query, gen: int, trimmed: int, force: bool) -> None:
        rows = int(q("SELECT count(*) FROM {C}", [])[0][0])
        stamped = None if force else self.bm25.stamped_gen()
        if stamped == gen and self.bm25.matches(gen, rows):  # another process of this machine caught it up
            self.bm25_gen = gen
            return
        if stamped is not None and trimmed <= stamped < gen:
            try:
                added, _, deleted = _changes(q, stamped)
                new = _in(q, BM25_ROWS + " WHERE", added)
                self.bm25.invalidate()
                self.bm25.apply(new, [*deleted, *added])  # a chunk indexed twice is impossible, even if re-applied
                self.bm25.mark(gen)
                if self.bm25.num_docs() == rows:
                    self.bm25_gen = gen
                    return
            except (OSError, ValueError, RuntimeError):
                pass  # damaged files: rebuilt below
        self._rebuild_bm25(q, gen, rows)

    def _rebuild_bm25(self, q: Query, gen: int, rows: int) -> None:
        for attempt in (1, 2):
            try:
                self.bm25.rebuild(q(BM25_ROWS + " ORDER BY c.id", []), rows, show_progress=self.show_progress)
                break
            except (OSError, ValueError, RuntimeError):
                if attempt == 2:
                    raise
                shutil.rmtree(self.bm25.folder, ignore_errors=True)  # the folder is gone or damaged: start afresh
                self.bm25.stamp.unlink(missing_ok=True)
                self.bm25 = TantivyBM25(self.bm25.folder)
        self.bm25.mark(gen)
        self.bm25_gen = gen

    # ---- vectors ------------------------------------------------------------------------------

    def _sync_vectors(self, q: Query, gen: int, trimmed: int, force: bool) -> None:
        count = int(q("SELECT count(*) FROM {C} WHERE vector IS NOT NULL", [])[0][0])
        if force:
            self._fill(q, gen, count)
            return
        if self.vectors.gen < 0 or self.vectors.gen > gen:  # first use: the saved copy, if any
            self.vectors.restore()
        have = self.vectors.gen
        if have == gen and len(self.vectors) == count:
            return
        if 0 <= have < gen and have >= trimmed:
            added, vectored, deleted = _changes(q, have)
            rows = _in(q, "SELECT c.id, c.vector FROM {C} c WHERE c.vector IS NOT NULL AND", [*added, *vectored])
            vecs = list(stacked([r[1] for r in rows])) if rows else []
            self.vectors.apply(gen, [int(r[0]) for r in rows], vecs, deleted)
            if len(self.vectors) == count:
                return
        self._fill(q, gen, count)

    def _fill(self, q: Query, gen: int, count: int) -> None:
        rows = q("SELECT id, vector FROM {C} WHERE vector IS NOT NULL ORDER BY id", [])
        self.vectors.fill((rows[i : i + _BATCH] for i in range(0, len(rows), _BATCH)), count, gen)

    def flush(self) -> None:
        """Save this process's vector index (with its generation) if it changed."""
        with self._flock():
            self.vectors.flush()


__all__ = ["PgIndexCache", "Query", "Snapshot"]
