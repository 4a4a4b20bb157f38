"""The knowledge store's vector index: a usearch HNSW index kept as a cache of the stored vectors.

The vectors live in the ``chunks`` table; this index (``knowledge.usearch``, with the generation it
matches in ``knowledge.json`` beside it) is rebuilt from them whenever it is missing, unreadable or
of another generation. The caller (:class:`~kairos.knowledge.store.SQLiteKnowledgeStore`) holds its
lock around every call. The PostgreSQL store's cache (:mod:`kairos.knowledge.pg_cache`) uses the
parts that know no database: :meth:`HnswIndex.restore`, :meth:`HnswIndex.fill` and :meth:`HnswIndex.apply`.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from rich.progress import Progress


def generation(db: sqlite3.Connection) -> int:
    """The database's write generation (bumped by every write transaction)."""
    return int(db.execute("SELECT value FROM meta WHERE key = 'gen'").fetchone()[0])


class HnswIndex:
    """Cosine HNSW over the chunks' vectors, stamped with the database generation it reflects.

    Args:
        path: the index file; its stamp is the same path with ``.json``.
        dim: vector length.
        show_progress: a progress bar while rebuilding.
    """

    def __init__(self, path: Path, dim: int, *, show_progress: bool = False) -> None:
        self.path = path
        self.dim = dim
        self.show_progress = show_progress
        self.gen = -1
        """The database generation the in-memory index reflects."""
        self._index: Any = None
        self._dirty = False

    def __len__(self) -> int:
        return len(self._index) if self._index is not None else 0

    def open(self, db: sqlite3.Connection) -> None:
        """Adopt the saved index if it matches the database, else rebuild it from the stored vectors."""
        gen = generation(db)
        n = db.execute("SELECT count(*) FROM chunks WHERE vector IS NOT NULL").fetchone()[0]
        if self.restore() == gen and len(self) == n:
            return
        self.rebuild(db)  # missing, unreadable or stale

    def restore(self) -> int | None:
        """Load the saved index; the generation it is stamped with, or None (missing, unreadable, another length)."""
        from usearch.index import Index

        try:
            saved = json.loads(self.path.with_suffix(".json").read_text(encoding="utf-8"))
            index = Index.restore(str(self.path), view=False)
        except (OSError, ValueError, RuntimeError, TypeError):
            return None
        gen = saved.get("gen") if isinstance(saved, dict) else None
        if index is None or index.ndim != self.dim or not isinstance(gen, int):
            return None
        self._index, self.gen, self._dirty = index, gen, False
        return gen

    def refresh(self, db: sqlite3.Connection) -> None:
        """Reload if another process (``kairos kb add`` beside a running agent) wrote since."""
        if generation(db) != self.gen:
            self.open(db)

    def rebuild(self, db: sqlite3.Connection) -> None:
        """Rebuild from the vectors in the database, in one snapshot, and save it."""
        db.execute("BEGIN")  # one snapshot: the vectors and the generation they belong to
        try:
            gen = generation(db)
            total = db.execute("SELECT count(*) FROM chunks WHERE vector IS NOT NULL").fetchone()[0]
            cursor = db.execute("SELECT id, vector FROM chunks WHERE vector IS NOT NULL ORDER BY id")
            self.fill(iter(lambda: cursor.fetchmany(2048), []), total, gen)
        finally:
            db.execute("COMMIT")

    def fill(self, batches: Iterable[Sequence[Sequence[Any]]], total: int, gen: int) -> None:
        """Replace the index by the ``(id, vector bytes)`` rows of ``batches`` (generation ``gen``) and save it."""
        from usearch.index import Index

        index = Index(ndim=self.dim, metric="cos", dtype="f32")
        with Progress(disable=not self.show_progress, transient=True) as progress:
            task = progress.add_task("indexing vectors", total=total)
            for batch in batches:
                keys = np.array([r[0] for r in batch], dtype=np.uint64)
                vecs = np.frombuffer(b"".join(bytes(r[1]) for r in batch), dtype=np.float32).reshape(len(batch), -1)
                index.add(keys, vecs)
                progress.advance(task, len(batch))
        self._index, self.gen, self._dirty = index, gen, True
        self.flush()

    def committed(
        self,
        db: sqlite3.Connection,
        before: int,
        add: Sequence[int] = (),
        vectors: Sequence[npt.NDArray[np.float32]] = (),
        remove: Sequence[int] = (),
    ) -> None:
        """After a write transaction that moved the database from generation ``before``: follow it.

        Incrementally when the index reflected ``before``; otherwise (another process wrote meanwhile)
        reload it whole.
        """
        if before != self.gen:
            self.open(db)
            self._dirty = True
        else:
            self.apply(before + 1, add, vectors, remove)

    def apply(
        self, gen: int, add: Sequence[int] = (), vectors: Sequence[npt.NDArray[np.float32]] = (),
        remove: Sequence[int] = (),
    ) -> None:  # fmt: skip
        """Follow the changes that brought the database to generation ``gen`` (keys already held are kept)."""
        for key in remove:
            self._index.remove(key)
        if add:
            keys = np.array(add, dtype=np.uint64)
            new = ~np.asarray(self._index.contains(keys), dtype=bool).reshape(-1)
            if new.any():
                self._index.add(keys[new], np.stack(vectors)[new])
        self.gen = gen
        self._dirty = True

    def search(self, query: npt.NDArray[np.float32], count: int) -> list[tuple[int, float]]:
        """``(chunk id, cosine similarity)`` of the ``count`` nearest vectors (approximate)."""
        found = self._index.search(query, count)
        return [(int(key), 1.0 - float(d)) for key, d in zip(found.keys, found.distances, strict=True)]

    def flush(self) -> None:
        """Save the index and its generation stamp if it changed (atomically: two processes may save at once)."""
        if not self._dirty or self._index is None:
            return
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        self._index.save(str(tmp))
        tmp.replace(self.path)
        tmp.write_text(json.dumps({"gen": self.gen}), encoding="utf-8")
        tmp.replace(self.path.with_suffix(".json"))
        self._dirty = False

    def size_bytes(self) -> int:
        """The saved index's size on disk."""
        return self.path.stat().st_size if self.path.exists() else 0
