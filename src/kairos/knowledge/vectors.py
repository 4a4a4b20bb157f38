"""The knowledge store's vector index: a usearch HNSW index kept as a cache of the stored vectors.

The vectors live in the ``chunks`` table; this index (``knowledge.usearch``, with the generation it
matches in ``knowledge.json`` beside it) is rebuilt from them whenever it is missing, unreadable or
of another generation. The caller (:class:`~kairos.knowledge.store.SQLiteKnowledgeStore`) holds its
lock around every call.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Sequence
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
        from usearch.index import Index

        try:
            saved = json.loads(self.path.with_suffix(".json").read_text(encoding="utf-8"))
            index = Index.restore(str(self.path), view=False)
            gen = generation(db)
            n = db.execute("SELECT count(*) FROM chunks WHERE vector IS NOT NULL").fetchone()[0]
            if index is not None and saved.get("gen") == gen and len(index) == n and index.ndim == self.dim:
                self._index, self.gen = index, gen
                return
        except (OSError, ValueError, RuntimeError, TypeError):
            pass  # missing, unreadable or stale: rebuilt below
        self.rebuild(db)

    def refresh(self, db: sqlite3.Connection) -> None:
        """Reload if another process (``kairos kb add`` beside a running agent) wrote since."""
        if generation(db) != self.gen:
            self.open(db)

    def rebuild(self, db: sqlite3.Connection) -> None:
        """Rebuild from the vectors in the database, in one snapshot, and save it."""
        from usearch.index import Index

        index = Index(ndim=self.dim, metric="cos", dtype="f32")
        db.execute("BEGIN")  # one snapshot: the vectors and the generation they belong to
        try:
            gen = generation(db)
            total = db.execute("SELECT count(*) FROM chunks WHERE vector IS NOT NULL").fetchone()[0]
            with Progress(disable=not self.show_progress, transient=True) as progress:
                task = progress.add_task("indexing vectors", total=total)
                cursor = db.execute("SELECT id, vector FROM chunks WHERE vector IS NOT NULL ORDER BY id")
                while batch := cursor.fetchmany(2048):
                    keys = np.array([r[0] for r in batch], dtype=np.uint64)
                    vecs = np.frombuffer(b"".join(r[1] for r in batch), dtype=np.float32).reshape(len(batch), -1)
                    index.add(keys, vecs)
                    progress.advance(task, len(batch))
        finally:
            db.execute("COMMIT")
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
        else:
            if add:
                self._index.add(np.array(add, dtype=np.uint64), np.stack(vectors))
            for key in remove:
                self._index.remove(key)
            self.gen = before + 1
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
