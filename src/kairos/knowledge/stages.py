"""Where an ingest's time goes: seconds per stage, summed over the files of one ``kb add``.

A stage is timed where its work happens (the store times its own rows, full-text index, vector
index and commit), so the figures add up to the ingest's time less the walk between them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal, TypeAlias

Stage: TypeAlias = Literal["extract", "chunk", "contexts", "embed", "rows", "bm25", "vectors", "commit"]
STAGES: tuple[Stage, ...] = ("extract", "chunk", "contexts", "embed", "rows", "bm25", "vectors", "commit")
"""In pipeline order: reading and text extraction (pypdf, trafilatura…), chunking, the model writing contexts
(``--contextual`` only), embedding, the SQLite rows, the tantivy full-text index (its commit fsyncs), the
HNSW vector index (adds and the save at the end), and the SQLite commit."""
LABELS: dict[Stage, str] = {
    "extract": "read+extract",
    "chunk": "chunk",
    "contexts": "write contexts",
    "embed": "embed",
    "rows": "rows",
    "bm25": "BM25 index",
    "vectors": "vector index",
    "commit": "commit",
}


class StageClock:
    """Seconds spent in each :data:`STAGES` entry since the last :meth:`reset`."""

    def __init__(self) -> None:
        self.seconds: dict[Stage, float] = dict.fromkeys(STAGES, 0.0)

    def reset(self) -> None:
        """Start counting from zero."""
        self.seconds = dict.fromkeys(STAGES, 0.0)

    @contextmanager
    def stage(self, name: Stage) -> Iterator[None]:
        """Count the time inside the block towards ``name`` (also when it raises)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def snapshot(self) -> dict[Stage, float]:
        """The seconds so far, per stage."""
        return dict(self.seconds)


def describe(seconds: dict[Stage, float], elapsed_s: float | None = None) -> str:
    """``embed 51.2 s, read+extract 3.1 s, …``: every stage, largest first.

    With ``elapsed_s``, the rest of it is ``other`` (walking folders, progress, loading a model). A stage that
    took no time at all (contexts without ``--contextual``) is left out.
    """
    parts = [(LABELS[s], v) for s, v in seconds.items() if v > 0 or s != "contexts"]
    if elapsed_s is not None:
        parts.append(("other", max(0.0, elapsed_s - sum(seconds.values()))))
    return ", ".join(f"{label} {v:.1f} s" for label, v in sorted(parts, key=lambda p: -p[1]))


__all__ = ["LABELS", "STAGES", "Stage", "StageClock", "describe"]
