"""An embedder wrapper for tests that counts passage batches (to see a cache work)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from kairos.retrieval.embeddings import Embedder


class Counting:
    """A real embedder that counts the passage batches it is asked for."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.passage_calls = 0

    def embed_queries(self, texts: Sequence[str]) -> NDArray[np.float32]:
        return self.inner.embed_queries(texts)

    def embed_passages(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.passage_calls += 1
        return self.inner.embed_passages(texts)
